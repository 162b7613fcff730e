// weir sweep: perplexity and *achieved* density of sparsity methods over a range of densities --
// the accuracy harness. Markdown (default), CSV or JSON, plus an SVG plot.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/cli.h"
#include "common/commands.h"
#include "common/model_flags.h"
#include "format/mapped_file.h"
#include "model/perplexity.h"
#include "sim/svg_plot.h"

namespace weir::tools {

namespace {
struct Row {
  std::string method, spec;
  double density = 0, ppl = 0, ppl_stderr = 0, mlp_density = 0, linear_density = 0;
  std::string error;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

int SweepMain(int argc, char** argv) {
  CLI::App app("Perplexity and achieved density of sparsity methods over a density range.", "sweep");
  ModelFlags mf;
  mf.ctx = 256;
  std::string file, methods = "dense,glu,gate,up,cats,teal,dip,dip-ca", range = "0.3:1.0:0.1", calib, format = "md",
              plot;
  int chunks = 4;
  bool json = false, no_progress = false;
  AddModelFlags(app, &mf);
  app.add_option("-f,--file", file, "evaluation text")->required();
  app.add_option("--methods", methods, "comma-separated methods (default dense,glu,gate,up,cats,teal,dip,dip-ca)");
  app.add_option("--density", range, "densities START:STOP:STEP (default 0.3:1.0:0.1)");
  app.add_option("--calib", calib, "calibration file (needed by cats, teal)");
  app.add_option("--chunks", chunks, "chunks of CTX tokens per evaluation (default 4; 0 = all)")->check(CLI::NonNegativeNumber);
  app.add_option("--format", format, "table format: md, csv (default md)")->check(CLI::IsMember({"md", "csv"}));
  app.add_option("--plot", plot, "write an SVG plot (perplexity vs achieved MLP density) to this file");
  app.add_flag("--json", json, "print as JSON");
  app.add_flag("--no-progress", no_progress, "no progress bar");
  if (int rc = Parse(app, argc, argv); rc >= 0) return rc;
  if (mf.ctx == 0) mf.ctx = 256;

  double start, stop, step;
  if (std::sscanf(range.c_str(), "%lf:%lf:%lf", &start, &stop, &step) != 3 || step <= 0 || start <= 0 ||
      stop > 1.0 + 1e-9 || start > stop) {
    std::fprintf(stderr, "weir sweep: --density wants START:STOP:STEP with 0 < START <= STOP <= 1, STEP > 0\n");
    return kExitUsage;
  }
  std::vector<double> densities;
  for (double d = start; d <= stop + 1e-9; d += step) densities.push_back(std::round(d * 1000) / 1000);
  std::unique_ptr<sparsity::Calibration> calibration;
  if (!calib.empty()) {
    auto c = sparsity::Calibration::Load(calib);
    if (!c.ok()) return Fail("sweep", c.status());
    calibration = std::make_unique<sparsity::Calibration>(std::move(c).value());
  }
  auto text = format::ReadSmallFile(file, 1ull << 30);
  if (!text.ok()) return Fail("sweep", text.status());
  auto m = LoadModel(mf);
  if (!m.ok()) return Fail("sweep", m.status());
  const model::Model& model = **m;
  if (!model.tokenizer()) return Fail("sweep", Status::InvalidArgument("the model has no tokenizer"));
  std::vector<int32_t> ids = model.tokenizer()->Encode(*text, model.tokenizer()->add_bos());
  ThreadPool pool(ThreadCount(mf));

  std::vector<std::string> method_list = Split(methods, ',');
  std::vector<std::pair<std::string, std::string>> runs;  // (method, spec)
  for (const auto& meth : method_list) {
    if (meth == "dense") {
      runs.emplace_back(meth, "dense");
      continue;
    }
    for (double d : densities) runs.emplace_back(meth, meth + ":" + StrFormat("%g", d));
  }
  ProgressBar bar("sweep", runs.size(), !json && !no_progress);
  std::vector<Row> rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    Row row;
    row.method = runs[i].first;
    row.spec = runs[i].second;
    auto policy = sparsity::ParseSparsity(row.spec, calibration.get());
    if (!policy.ok()) {
      row.error = policy.status().message();
    } else {
      row.density = (*policy)->info().density;
      model::SessionOptions so;
      so.ctx = mf.ctx;
      so.kv_types = mf.kv_types;
      so.n_batch = std::min(mf.ctx, 64);
      so.sparsity = policy->get();
      auto session = model::Session::Create(model, &pool, so);
      if (!session.ok()) {
        row.error = session.status().message();
      } else {
        model::PerplexityOptions po;
        po.max_chunks = chunks;
        auto r = model::Perplexity(**session, ids, model.tokenizer()->bos_id(), po);
        if (!r.ok()) return Fail("sweep", r.status());
        row.ppl = r->ppl;
        row.ppl_stderr = r->ppl_stderr;
        row.mlp_density = (*session)->traffic().mlp_density();
        row.linear_density = (*session)->traffic().linear_density();
      }
    }
    rows.push_back(row);
    bar.Update(i + 1, row.spec);
  }
  bar.Finish();

  if (!plot.empty()) {
    sim::PlotSpec ps;
    ps.title = "perplexity vs achieved MLP density: " + model.file().path;
    ps.x_label = "achieved MLP weight density";
    ps.y_label = "perplexity";
    ps.y_from_zero = false;
    for (const auto& meth : method_list) {
      sim::PlotSeries s;
      s.name = meth;
      for (const auto& r : rows) {
        if (r.method == meth && r.error.empty()) {
          s.x.push_back(r.mlp_density);
          s.y.push_back(r.ppl);
        }
      }
      if (!s.x.empty()) ps.series.push_back(s);
    }
    std::ofstream f(plot);
    f << sim::LinePlotSvg(ps);
    if (!f) return Fail("sweep", Status::IoError("cannot write " + plot));
  }

  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : rows) {
      nlohmann::json j = {{"method", r.method}, {"spec", r.spec}, {"density", r.density}};
      if (r.error.empty()) {
        j["ppl"] = r.ppl;
        j["ppl_stderr"] = r.ppl_stderr;
        j["mlp_density"] = r.mlp_density;
        j["linear_density"] = r.linear_density;
      } else {
        j["error"] = r.error;
      }
      arr.push_back(j);
    }
    PrintJson({{"model", model.file().path}, {"file", file}, {"ctx", mf.ctx}, {"chunks", chunks}, {"rows", arr}});
    return kExitOk;
  }
  if (format == "csv") {
    std::printf("method,spec,density,mlp_density,linear_density,ppl,ppl_stderr,error\n");
    for (const auto& r : rows) {
      std::printf("%s,%s,%.3f,%.4f,%.4f,%.4f,%.4f,\"%s\"\n", r.method.c_str(), r.spec.c_str(), r.density,
                  r.mlp_density, r.linear_density, r.ppl, r.ppl_stderr, r.error.c_str());
    }
    return kExitOk;
  }
  std::printf("| method | spec | achieved MLP density | achieved linear density | perplexity |\n|---|---|---:|---:|---:|\n");
  for (const auto& r : rows) {
    if (!r.error.empty()) {
      std::printf("| %s | %s | - | - | (%s) |\n", r.method.c_str(), r.spec.c_str(), r.error.c_str());
    } else {
      std::printf("| %s | %s | %.3f | %.3f | %.3f ± %.3f |\n", r.method.c_str(), r.spec.c_str(), r.mlp_density,
                  r.linear_density, r.ppl, r.ppl_stderr);
    }
  }
  return kExitOk;
}

}  // namespace weir::tools
