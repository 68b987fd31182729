// Line plots as PNG files, drawn by gnuplot (Debian: gnuplot-nox). The tools that measure
// (eval, bench-memory) use it for their --plot flag; nothing else in streamd needs gnuplot.
//
// The data travels inside the generated script as gnuplot datablocks, so no temporary files
// are written; the script is piped to `gnuplot` found on PATH and its exit status is checked.
#pragma once

#include <string>
#include <vector>

#include "engine/util/status.h"

namespace streamd::tools {

struct PlotSeries {
  std::string label;
  std::vector<double> x;  // same length as y
  std::vector<double> y;
};

struct LinePlot {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;  // one line each, drawn in order
  bool log_x = false;
  int width = 1000;  // pixels
  int height = 600;
};

// The gnuplot script that draws `plot` into `png_path` (exposed for tests).
std::string GnuplotScript(const LinePlot& plot, const std::string& png_path);

// OK when gnuplot is on PATH, else FAILED_PRECONDITION naming `png_path`: lets a tool refuse
// --plot before a long run rather than after it.
Status CheckGnuplot(const std::string& png_path);

// Draws `plot` into `png_path`. Errors: FAILED_PRECONDITION when gnuplot is not on PATH,
// INVALID_ARGUMENT for a plot without data, INTERNAL when gnuplot fails (its stderr is
// passed through) or leaves no file behind.
Status WritePng(const LinePlot& plot, const std::string& png_path);

}  // namespace streamd::tools
