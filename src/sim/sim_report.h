// Renders simulator and planner results as JSON documents and Markdown tables (the text the
// tools print). Byte quantities are in bytes in JSON and in decimal GB / MB in tables.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/expert_planner.h"
#include "sim/planner.h"
#include "sim/simulator.h"

namespace weir::sim {

nlohmann::json MemoryPlanToJson(const MemoryPlan& plan);
nlohmann::json SimResultToJson(const SimResult& r, bool per_layer = true);
nlohmann::json PlanToJson(const Plan& plan);

// Summary table, memory plan, and (per_layer) one row per layer.
std::string SimResultMarkdown(const SimResult& r, bool per_layer);
std::string PlanMarkdown(const Plan& plan);
nlohmann::json ExpertPlanToJson(const ExpertPlan& plan);
std::string ExpertPlanMarkdown(const ExpertPlan& plan);

// "1.234 GB" / "56.7 MB" / "890 kB" / "12 B" (decimal units, as in the papers' tables).
std::string FormatDecimalBytes(double bytes);

}  // namespace weir::sim
