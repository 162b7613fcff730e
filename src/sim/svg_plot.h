// A minimal line-plot writer producing standalone SVG text (no scripting, no external fonts),
// for `weir sim --sweep ... --plot out.svg`. Library code: it returns the text; tools write it.
//
// Thread safety: pure function.
#pragma once

#include <string>
#include <vector>

namespace weir::sim {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length
};

struct PlotSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool y_from_zero = true;
  std::vector<PlotSeries> series;
};

// Non-finite points are skipped; an empty plot still renders axes and the title.
std::string LinePlotSvg(const PlotSpec& spec, int width = 720, int height = 440);

}  // namespace weir::sim
