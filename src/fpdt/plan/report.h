// How `fpdt plan` shows a plan: a text table (rank 0's view of one rank) and the same numbers as one
// JSON object. Formatting only; every number comes from plan.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fpdt/plan/plan.h"

namespace fpdt::plan {

// The configuration, the memory table per component and tier, FLOPs, traffic, prefetch and time.
std::string format_plan_text(const PlanResult& plan);
// "longest sequence ..." for the searched mode, and the three modes side by side.
std::string format_max_seq_text(const MaxSeqResult& searched, const std::vector<MaxSeqResult>& by_mode);

nlohmann::ordered_json plan_to_json(const PlanResult& plan);
nlohmann::ordered_json max_seq_to_json(const MaxSeqResult& result);

}  // namespace fpdt::plan
