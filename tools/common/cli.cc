#include "common/cli.h"

#include <cstdio>
#include <cstring>
#include <vector>

namespace weir::tools {

int Parse(CLI::App& app, int argc, char** argv) {
  // llama.cpp's spellings of the cache types, which CLI11 cannot declare (one-letter short names).
  std::vector<char*> args(argv, argv + argc);
  static char kCacheTypeK[] = "--cache-type-k", kCacheTypeV[] = "--cache-type-v";
  for (char*& a : args) {
    if (std::strcmp(a, "-ctk") == 0) a = kCacheTypeK;
    if (std::strcmp(a, "-ctv") == 0) a = kCacheTypeV;
  }
  try {
    app.parse(argc, args.data());
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "weir %s: %s\nRun 'weir %s --help' for usage.\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return kExitUsage;
  }
  return -1;
}

int Fail(const std::string& command, const Status& status) {
  std::fprintf(stderr, "weir %s: error: %s\n", command.c_str(), status.ToString().c_str());
  return kExitError;
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void PrintJson(const nlohmann::json& doc) {
  // Generated text may hold invalid UTF-8 (a random model, a piece cut mid-character): replace
  // such bytes with U+FFFD instead of throwing.
  std::string s = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

ProgressBar::ProgressBar(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled),
      start_(std::chrono::steady_clock::now()), last_draw_() {}

ProgressBar::~ProgressBar() {
  if (!finished_) Finish();
}

void ProgressBar::Update(uint64_t done, const std::string& suffix) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  if (frac > 1) frac = 1;
  const int width = 30;
  int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  double secs = std::chrono::duration<double>(now - start_).count();
  double eta = frac > 0 ? secs / frac - secs : 0;
  std::fprintf(stderr, "\r%s [%s] %3.0f%% %llu/%llu %.1fs eta %.1fs %s\033[K", label_.c_str(),
               bar.c_str(), frac * 100, static_cast<unsigned long long>(done),
               static_cast<unsigned long long>(total_), secs, eta, suffix.c_str());
  std::fflush(stderr);
}

void ProgressBar::Finish(const std::string& suffix) {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  last_draw_ = {};
  Update(total_, suffix);
  std::fputc('\n', stderr);
}

}  // namespace weir::tools
