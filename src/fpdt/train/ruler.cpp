// RULER in `fpdt eval` (ruler.h): its options, the word list and the essay haystack, the metric and the
// effective length, the run over tasks × lengths with progress, and its JSON and table. The prompts
// themselves are ruler_tasks.cpp's.
#include "fpdt/train/ruler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "fpdt/base/error.h"
#include "fpdt/base/file_io.h"
#include "fpdt/base/log.h"
#include "fpdt/base/timer.h"

namespace fpdt::train {

namespace {

constexpr const char* kModule = "ruler";

std::string str(int64_t value) { return std::to_string(value); }

// "1h 02m", "3m 20s", "12s".
std::string duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh %02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm %02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else
    std::snprintf(text, sizeof text, "%llds", static_cast<long long>(s));
  return text;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    items.push_back(item);
    begin = end + 1;
  }
  return items;
}

std::string lower_ascii(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// A sample as ruler.json and the progress file write it, and back.
nlohmann::ordered_json sample_json(const RulerSample& sample) {
  return {{"task", sample.task},
          {"length", sample.length_tokens},
          {"index", sample.index},
          {"prompt_tokens", sample.prompt_tokens},
          {"references", sample.references},
          {"prediction", sample.prediction},
          {"generated_ids", sample.generated_ids},
          {"prompt_ids", sample.prompt_ids},
          {"score", sample.score},
          {"seconds", sample.seconds}};
}

RulerSample sample_from_json(const nlohmann::ordered_json& json) {
  RulerSample sample;
  sample.task = json.at("task").get<std::string>();
  sample.length_tokens = json.at("length").get<int64_t>();
  sample.index = json.at("index").get<int64_t>();
  sample.prompt_tokens = json.at("prompt_tokens").get<int64_t>();
  sample.references = json.at("references").get<std::vector<std::string>>();
  sample.prediction = json.at("prediction").get<std::string>();
  sample.generated_ids = json.at("generated_ids").get<std::vector<int32_t>>();
  sample.prompt_ids = json.at("prompt_ids").get<std::vector<int32_t>>();
  sample.score = json.at("score").get<double>();
  sample.seconds = json.at("seconds").get<double>();
  return sample;
}

}  // namespace

std::string ruler_template_spelling(RulerChat chat) { return chat == RulerChat::smollm2 ? "smollm2-chat" : "base"; }

void declare_ruler_options(OptionSet& set, RulerSettings& s) {
  set.add("ruler", "", "run RULER's 11 synthetic tasks (answers generated with the KV cache)", s.all_tasks);
  set.add("tasks", "a,b,...",
          "RULER tasks to run: niah_single_1/2/3, niah_multikey_1/2/3, niah_multivalue, niah_multiquery, vt, cwe, fwe",
          s.tasks);
  set.add("ruler-lengths", "auto|L,...",
          "RULER target lengths (prompt + answer tokens; auto: 4K, 8K, ... up to --seq, or --seq when below 4K)",
          s.lengths);
  set.add("ruler-samples", "N", "RULER prompts per task and length (RULER's own runs use 500)", s.samples).at_least(1);
  set.add("ruler-haystack", "FILE", "text file of RULER's essay haystack (default: --data's held-out text)",
          s.haystack);
  set.add("ruler-threshold", "X",
          "report the effective length also against this average (besides Llama-2-7B's 85.6 at 4K)", s.threshold)
      .at_least(0)
      .at_most(100);
  set.add("ruler-template", "base|smollm2-chat",
          "prompt template: RULER's base (the task text alone) or SmolLM2-Instruct's chat turn", s.chat,
          ruler_template_spelling,
          [](const std::string& word) { return word == "smollm2-chat" ? RulerChat::smollm2 : RulerChat::base; })
      .choices({"base", "smollm2-chat"});
  set.add("ruler-seed", "N", "seed of RULER's prompts (RULER's default 42)", s.seed);
}

std::vector<std::string> ruler_task_names(const RulerSettings& s) {
  std::vector<std::string> names;
  if (s.tasks.empty()) {
    if (s.all_tasks)
      for (const RulerRecipe& recipe : ruler_recipes()) names.push_back(recipe.name);
    return names;
  }
  for (const std::string& name : split_list(s.tasks)) {
    ruler_recipe(name);  // refuses unknown names and the QA tasks
    if (std::find(names.begin(), names.end(), name) != names.end())
      throw Error(kModule, "--tasks names " + name + " twice", "name each task once");
    names.push_back(name);
  }
  return names;
}

std::vector<int64_t> ruler_lengths(const RulerSettings& s, int64_t seq_tokens) {
  std::vector<int64_t> lengths;
  if (s.lengths == "auto") {
    for (int64_t L = 4096; L <= seq_tokens; L *= 2) lengths.push_back(L);
    if (lengths.empty()) lengths.push_back(seq_tokens);
    return lengths;
  }
  for (const std::string& item : split_list(s.lengths)) {
    const std::optional<long double> value = parse_number(item, Unit::tokens);
    if (!value || *value < 1 || *value != std::floor(*value))
      throw Error(kModule, "--ruler-lengths: '" + item + "' is not a number of tokens",
                  "auto, or token counts separated by commas, e.g. 4K,8K,16K");
    const auto L = static_cast<int64_t>(*value);
    if (L > seq_tokens)
      throw Error(kModule, "--ruler-lengths: " + item + " tokens is longer than --seq " + str(seq_tokens),
                  "raise --seq (the model is laid out for sequences of --seq tokens) or shorten the length");
    if (std::find(lengths.begin(), lengths.end(), L) != lengths.end())
      throw Error(kModule, "--ruler-lengths names " + item + " twice", "name each length once");
    lengths.push_back(L);
  }
  std::sort(lengths.begin(), lengths.end());
  return lengths;
}

std::vector<std::string> load_word_list(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw Error(kModule, "the word list " + path + " is missing; RULER draws its keys and words from it",
                "install Debian's wamerican package (apt-get install wamerican; scripts/install_deps.sh does)");
  std::vector<std::string> words;
  for (const std::string& word : split_words(read_text_file(path, kModule, "install wamerican"))) {
    const bool letters = std::all_of(word.begin(), word.end(), [](char c) { return c >= 'a' && c <= 'z'; });
    if (letters && word.size() >= 3) words.push_back(word);
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  if (words.empty())
    throw Error(kModule, "the word list " + path + " has no lowercase words", "reinstall Debian's wamerican package");
  return words;
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t begin = 0;
  while (true) {
    begin = text.find_first_not_of(" \t\n\r\f\v", begin);
    if (begin == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\n\r\f\v", begin), text.size());
    words.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return words;
}

RulerSources load_ruler_sources(const RulerSettings& s, const data::Tokenizer& tokenizer,
                                const data::ShardReader& held_out, int64_t essay_tokens) {
  RulerSources sources;
  sources.words = load_word_list();
  if (!s.haystack.empty()) {
    sources.essay = split_words(read_text_file(s.haystack, kModule, "--ruler-haystack names a text file"));
    sources.essay_origin = s.haystack;
  } else {
    const auto count =
        std::min<uint64_t>(held_out.token_count(), static_cast<uint64_t>(std::max<int64_t>(essay_tokens, 0)));
    std::vector<int32_t> ids(static_cast<size_t>(count));
    if (count > 0) held_out.read(0, count, ids.data());
    std::string text;
    auto document = ids.begin();
    for (auto it = ids.begin();; ++it) {  // the documents between end-of-document tokens, joined by a space
      if (it == ids.end() || *it == tokenizer.end_of_document_id()) {
        text.append(" ").append(tokenizer.decode(std::vector<int32_t>(document, it)));
        if (it == ids.end()) break;
        document = it + 1;
      }
    }
    sources.essay = split_words(text);
    sources.essay_origin = held_out.path() + " (its first " + str(static_cast<int64_t>(count)) + " tokens)";
  }
  if (sources.essay.empty())
    throw Error(kModule, "the essay haystack (" + sources.essay_origin + ") has no words",
                "give a text file with --ruler-haystack");
  return sources;
}

std::string ruler_postprocess(const std::string& prediction) {
  auto strip = [](const std::string& text) {
    const size_t begin = text.find_first_not_of(" \t\n\r\f\v");
    return begin == std::string::npos ? std::string()
                                      : text.substr(begin, text.find_last_not_of(" \t\n\r\f\v") - begin + 1);
  };
  std::string text = strip(prediction);
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  return strip(text);
}

double string_match_all(const std::string& prediction, const std::vector<std::string>& references) {
  if (references.empty()) return 0.0;
  const std::string lowered = lower_ascii(prediction);
  double found = 0.0;
  for (const std::string& reference : references)
    found += lowered.find(lower_ascii(reference)) != std::string::npos ? 1.0 : 0.0;
  return found / static_cast<double>(references.size());
}

int64_t effective_length(const std::vector<int64_t>& lengths, const std::vector<double>& averages, double threshold) {
  FPDT_ASSERT(lengths.size() == averages.size());
  int64_t effective = 0;
  for (size_t i = 0; i < lengths.size() && averages[i] >= threshold; ++i) effective = lengths[i];
  return effective;
}

RulerResult run_ruler(const RulerSettings& s, const std::vector<int64_t>& lengths, const data::Tokenizer& tokenizer,
                      const RulerSources& sources, const GenerateFn& generate, const std::vector<RulerSample>& finished,
                      const std::string& progress_path, const ScoredFn& on_scored) {
  const Timer timer;
  RulerResult result;
  result.tasks = ruler_task_names(s);
  result.lengths = lengths;
  result.essay_origin = sources.essay_origin;
  FPDT_ASSERT(std::is_sorted(lengths.begin(), lengths.end()));
  // Progress: the ETA scales the time so far by the target tokens left (linear in the length: an
  // underestimate where attention's quadratic cost dominates).
  double planned_tokens = 0.0, done_tokens = 0.0;
  for (const int64_t L : lengths)
    planned_tokens += static_cast<double>(L * s.samples) * static_cast<double>(result.tasks.size());
  const int64_t planned_prompts = s.samples * static_cast<int64_t>(lengths.size() * result.tasks.size());
  int64_t done_prompts = 0;
  // A stopped run's samples, by (task, length, index); those of this run's plan are not generated again.
  std::map<std::tuple<std::string, int64_t, int64_t>, const RulerSample*> resumed;
  for (const RulerSample& sample : finished) {
    const bool planned = sample.index < s.samples &&
                         std::find(lengths.begin(), lengths.end(), sample.length_tokens) != lengths.end() &&
                         std::find(result.tasks.begin(), result.tasks.end(), sample.task) != result.tasks.end();
    if (planned && resumed.emplace(std::make_tuple(sample.task, sample.length_tokens, sample.index), &sample).second)
      planned_tokens -= static_cast<double>(sample.length_tokens);
  }
  if (!resumed.empty())
    log::info("ruler: " + str(static_cast<int64_t>(resumed.size())) + " of " + str(planned_prompts) +
              " prompts already answered in " + progress_path + "; answering the others");
  for (const int64_t L : lengths) {
    double sum = 0.0;
    for (const std::string& task : result.tasks) {
      const RulerRecipe& recipe = ruler_recipe(task);
      RulerCell cell;
      cell.task = task;
      cell.length_tokens = L;
      cell.samples = s.samples;
      const Timer prepare;
      const std::vector<RulerPrompt> prompts =
          make_ruler_prompts(recipe, L, s.samples, tokenizer, sources, s.chat, s.seed);
      cell.prepare_seconds = prepare.seconds();
      double score_sum = 0.0;
      for (size_t n = 0; n < prompts.size(); ++n) {
        const RulerPrompt& prompt = prompts[n];
        const auto found = resumed.find(std::make_tuple(task, L, static_cast<int64_t>(n)));
        if (found != resumed.end()) {
          const RulerSample& sample = *found->second;
          if (sample.prompt_ids != prompt.tokens)
            throw Error(kModule,
                        progress_path + " holds an answer to " + task + " at " + str(L) + " tokens, sample " +
                            str(static_cast<int64_t>(n)) + ", whose prompt is not the one drawn now",
                        "the word list, the haystack or the tokenizer changed since: delete the file to start over");
          score_sum += sample.score;
          cell.seconds += sample.seconds;
          result.samples.push_back(sample);
          ++done_prompts;
          continue;
        }
        const Timer answer;
        const std::vector<int32_t> generated = generate(prompt.tokens, recipe.tokens_to_generate);
        RulerSample sample;
        sample.task = task;
        sample.length_tokens = L;
        sample.index = static_cast<int64_t>(n);
        sample.prompt_tokens = static_cast<int64_t>(prompt.tokens.size());
        sample.prompt_ids = prompt.tokens;
        sample.generated_ids = generated;
        sample.references = prompt.references;
        sample.seconds = answer.seconds();
        sample.prediction = ruler_postprocess(tokenizer.decode(generated));
        sample.score = string_match_all(sample.prediction, sample.references);
        score_sum += sample.score;
        cell.seconds += sample.seconds;
        if (on_scored) on_scored(sample);
        result.samples.push_back(std::move(sample));
        done_tokens += static_cast<double>(L);
        ++done_prompts;
        char line[256];
        std::snprintf(line, sizeof line,
                      "ruler %lld/%lld: %s at %lld tokens, sample %zu/%lld, score %.1f so far, %.1f s, ETA %s",
                      static_cast<long long>(done_prompts), static_cast<long long>(planned_prompts), task.c_str(),
                      static_cast<long long>(L), n + 1, static_cast<long long>(s.samples),
                      100.0 * score_sum / static_cast<double>(n + 1), result.samples.back().seconds,
                      duration(timer.seconds() * (planned_tokens - done_tokens) / done_tokens).c_str());
        log::info(line);
      }
      cell.score = 100.0 * score_sum / static_cast<double>(s.samples);
      sum += cell.score;
      result.cells.push_back(cell);
    }
    result.averages.push_back(sum / static_cast<double>(result.tasks.size()));
  }
  result.effective_length = effective_length(result.lengths, result.averages, kRulerThreshold);
  result.effective_length_at_threshold = effective_length(result.lengths, result.averages, s.threshold);
  result.seconds = timer.seconds();
  for (const std::string& line : ruler_table(result, s)) log::info(line);
  return result;
}

nlohmann::ordered_json ruler_json(const RulerResult& result, const RulerSettings& s) {
  nlohmann::ordered_json json;
  json["tasks"] = result.tasks;
  json["lengths"] = result.lengths;
  json["samples_per_cell"] = s.samples;
  json["template"] = ruler_template_spelling(s.chat);
  json["seed"] = s.seed;
  json["haystack"] = result.essay_origin;
  json["metric"] = "string_match_all";
  json["seconds"] = result.seconds;
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  for (const RulerCell& cell : result.cells)
    cells.push_back(
        {{"task", cell.task},
         {"length", cell.length_tokens},
         {"samples", cell.samples},
         {"tokens_to_generate", ruler_recipe(cell.task).tokens_to_generate},
         {"score", cell.score},
         {"prepare_seconds", cell.prepare_seconds},
         {"seconds", cell.seconds},
         {"seconds_per_prompt", cell.samples > 0 ? cell.seconds / static_cast<double>(cell.samples) : 0.0}});
  json["cells"] = cells;
  nlohmann::ordered_json averages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < result.lengths.size(); ++i)
    averages.push_back({{"length", result.lengths[i]}, {"average", result.averages[i]}});
  json["averages"] = averages;
  json["effective_length"] = {{"threshold", kRulerThreshold}, {"length", result.effective_length}};
  json["effective_length_at_threshold"] = {{"threshold", s.threshold},
                                           {"length", result.effective_length_at_threshold}};
  nlohmann::ordered_json samples = nlohmann::ordered_json::array();
  for (const RulerSample& sample : result.samples) samples.push_back(sample_json(sample));
  json["samples"] = samples;
  return json;
}

std::vector<std::string> ruler_table(const RulerResult& result, const RulerSettings& s) {
  std::vector<std::string> lines;
  lines.push_back("RULER (string_match_all x 100; " + str(s.samples) + " prompts per cell, template " +
                  ruler_template_spelling(s.chat) + ", haystack " + result.essay_origin + ")");
  char cell[32];
  std::string header = "task            ";
  for (const int64_t L : result.lengths) {
    std::snprintf(cell, sizeof cell, " %9lld", static_cast<long long>(L));
    header += cell;
  }
  lines.push_back(header);
  for (size_t t = 0; t < result.tasks.size(); ++t) {
    std::snprintf(cell, sizeof cell, "%-16s", result.tasks[t].c_str());
    std::string row = cell;
    for (size_t l = 0; l < result.lengths.size(); ++l) {
      std::snprintf(cell, sizeof cell, " %9.1f", result.cells[l * result.tasks.size() + t].score);
      row += cell;
    }
    lines.push_back(row);
  }
  std::string average = "average         ";
  for (const double value : result.averages) {
    std::snprintf(cell, sizeof cell, " %9.1f", value);
    average += cell;
  }
  lines.push_back(average);
  auto effective = [&](double threshold, int64_t length) {
    char line[160];
    std::snprintf(line, sizeof line, "effective length (average >= %.1f at every length up to it): %s", threshold,
                  length > 0 ? str(length).c_str() : ("below " + str(result.lengths.front())).c_str());
    return std::string(line);
  };
  if (!result.lengths.empty()) {
    lines.push_back(effective(kRulerThreshold, result.effective_length));
    if (s.threshold != kRulerThreshold) lines.push_back(effective(s.threshold, result.effective_length_at_threshold));
  }
  return lines;
}

std::vector<RulerSample> read_ruler_progress(const std::string& text, const std::string& path,
                                             const nlohmann::ordered_json& identity) {
  std::vector<RulerSample> samples;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (lines.eof()) break;  // no '\n' after it: torn by a killed writer, and its sample is answered again
    const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (number == 1) {
      if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("ruler_progress"))
        throw Error(kModule, path + " is not a RULER progress file (its first line names no run)",
                    "delete it, or give eval another --out");
      const nlohmann::ordered_json& theirs = parsed.at("ruler_progress");
      std::string differs;
      for (const auto& [field, ours] : identity.items())
        if (!theirs.contains(field) || theirs.at(field) != ours)
          differs += (differs.empty() ? "" : "; ") + field + " " +
                     (theirs.contains(field) ? theirs.at(field).dump() : std::string("(none)")) + " there, " +
                     ours.dump() + " now";
      if (!differs.empty())
        throw Error(kModule, path + " holds the answers of another RULER run: " + differs,
                    "rerun with that run's options to finish it, or delete the file (or give another --out) to "
                    "start over");
      continue;
    }
    try {
      samples.push_back(sample_from_json(parsed));
    } catch (const nlohmann::ordered_json::exception&) {
      throw Error(kModule, path + " line " + str(number) + " is not a RULER sample",
                  "delete the file to start over (its samples are answered again)");
    }
  }
  return samples;
}

RulerProgressLog::RulerProgressLog(const std::string& path, const nlohmann::ordered_json& identity,
                                   const std::vector<RulerSample>& kept)
    : path_(path) {
  std::string text = nlohmann::ordered_json{{"ruler_progress", identity}}.dump() + "\n";
  for (const RulerSample& sample : kept) text += sample_json(sample).dump() + "\n";
  write_text_file_atomic(path, text, kModule);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0)
    throw Error(kModule, "cannot open the RULER progress file " + path + ": " + std::strerror(errno),
                "check that --out is writable");
}

RulerProgressLog::~RulerProgressLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RulerProgressLog::append(const RulerSample& sample) {
  const std::string line = sample_json(sample).dump() + "\n";
  write_fully(fd_, line.data(), line.size(), path_, kModule);
  if (::fsync(fd_) != 0)
    throw Error(kModule, "cannot save " + path_ + ": " + std::strerror(errno), "check the disk holding --out");
}

}  // namespace fpdt::train
