#include "sim/svg_plot.h"

#include <algorithm>
#include <cmath>

#include "base/status.h"

namespace weir::sim {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// About five round tick values covering [lo, hi].
std::vector<double> Ticks(double lo, double hi) {
  double span = hi - lo;
  if (!(span > 0)) return {lo};
  double raw = span / 5;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step; v += step) {
    t.push_back(std::fabs(v) < 1e-12 * step ? 0 : v);
  }
  return t;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

}  // namespace

std::string LinePlotSvg(const PlotSpec& spec, int width, int height) {
  const double left = 70, right = 20, top = 40, bottom = 55;
  const double pw = width - left - right, ph = height - top - bottom;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const PlotSeries& s : spec.series) {
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]);
      y1 = std::max(y1, s.y[i]);
    }
  }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (spec.y_from_zero) y0 = std::min(0.0, y0);
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  y1 += (y1 - y0) * 0.05;
  auto X = [&](double v) { return left + (v - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) { return top + ph - (v - y0) / (y1 - y0) * ph; };

  std::string o = StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" "
      "fill=\"white\"/>\n",
      width, height, width, height);
  o += StrFormat("<text x=\"%g\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">%s</text>\n",
                 width / 2.0, Escape(spec.title).c_str());
  for (double t : Ticks(x0, x1)) {
    o += StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
        X(t), top, X(t), top + ph, X(t), top + ph + 16, t);
  }
  for (double t : Ticks(y0, y1)) {
    o += StrFormat(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        left, Y(t), left + pw, Y(t), left - 6, Y(t) + 4, t);
  }
  o += StrFormat(
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
      "stroke=\"black\"/>\n",
      left, top, pw, ph);
  o += StrFormat("<text x=\"%g\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", left + pw / 2,
                 height - 14, Escape(spec.x_label).c_str());
  o += StrFormat(
      "<text transform=\"translate(18,%g) rotate(-90)\" text-anchor=\"middle\">%s"
      "</text>\n",
      top + ph / 2, Escape(spec.y_label).c_str());
  for (size_t k = 0; k < spec.series.size(); ++k) {
    const PlotSeries& s = spec.series[k];
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string pts;
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      pts += StrFormat("%.1f,%.1f ", X(s.x[i]), Y(s.y[i]));
      o += StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", X(s.x[i]),
                     Y(s.y[i]), color);
    }
    o += StrFormat("<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                   pts.c_str(), color);
    o += StrFormat("<text x=\"%g\" y=\"%g\" fill=\"%s\">%s</text>\n", left + 10,
                   top + 16 + 16.0 * static_cast<double>(k), color, Escape(s.name).c_str());
  }
  o += "</svg>\n";
  return o;
}

}  // namespace weir::sim
