// The ranks' agreement on their options (see rank_agreement.h).
#include "fpdt/train/rank_agreement.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "fpdt/base/error.h"
#include "fpdt/base/hash.h"

namespace fpdt::train {

namespace {

// "0-2, 5": ranks in order, runs joined.
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += (text.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return text;
}

}  // namespace

void check_ranks_agree(comm::Communicator& world, const std::string& module, const nlohmann::ordered_json& settings) {
  const int P = world.size();
  if (P == 1) return;
  const std::string text = settings.dump();
  const uint64_t hash = fnv1a(text);
  std::vector<uint64_t> hashes(static_cast<size_t>(P));
  world.all_gather(&hash, hashes.data(), sizeof hash);
  bool agree = true;
  for (const uint64_t other : hashes) agree = agree && other == hash;
  if (agree) return;
  // They differ: every rank's settings, to name what differs.
  const uint64_t length = text.size();
  std::vector<uint64_t> lengths(static_cast<size_t>(P));
  world.all_gather(&length, lengths.data(), sizeof length);
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  size_t total = 0;
  for (const size_t count : counts) total += count;
  std::string all(total, '\0');
  world.all_gather_v(text.data(), all.data(), counts.data());
  std::vector<nlohmann::ordered_json> by_rank;
  for (size_t r = 0, at = 0; r < counts.size(); at += counts[r++]) by_rank.push_back(nlohmann::ordered_json::parse(all.substr(at, counts[r])));
  std::string differences;
  std::vector<std::string> names;  // every option any rank has, in the first rank's order, then the others'
  for (const nlohmann::ordered_json& rank_settings : by_rank)
    for (const auto& item : rank_settings.items())
      if (std::find(names.begin(), names.end(), item.key()) == names.end()) names.push_back(item.key());
  for (const std::string& name : names) {
    std::map<std::string, std::vector<int>> ranks_of;  // value → ranks
    for (int r = 0; r < P; ++r) {
      const auto found = by_rank[static_cast<size_t>(r)].find(name);
      ranks_of[found == by_rank[static_cast<size_t>(r)].end() ? "(none)" : found->dump()].push_back(r);
    }
    if (ranks_of.size() == 1) continue;
    std::string values;
    for (const auto& [value, ranks] : ranks_of)
      values += (values.empty() ? "" : "; ") + value + " on rank" + (ranks.size() > 1 ? "s " : " ") + rank_list(ranks);
    differences += (differences.empty() ? "" : ", ") + ("--" + name) + " (" + values + ")";
  }
  throw Error(module, "the " + std::to_string(P) + " ranks were launched with different options: " + differences,
              "launch every rank with the same command line");
}

}  // namespace fpdt::train
