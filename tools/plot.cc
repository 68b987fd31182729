#include "tools/plot.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace streamd::tools {
namespace {

// A gnuplot single-quoted string: only the quote itself needs escaping (doubled).
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

// A POSIX shell single-quoted word.
std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The absolute path of `name` on $PATH, or "" when there is none.
std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + name;
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

}  // namespace

std::string GnuplotScript(const LinePlot& plot, const std::string& png_path) {
  std::ostringstream s;
  s.precision(10);
  s << "set terminal pngcairo size " << plot.width << "," << plot.height
    << " enhanced font 'sans,11'\n"
    << "set output " << Quote(png_path) << "\n"
    << "set title " << Quote(plot.title) << " noenhanced\n"
    << "set xlabel " << Quote(plot.x_label) << " noenhanced\n"
    << "set ylabel " << Quote(plot.y_label) << " noenhanced\n"
    << "set grid\n"
    // A palette that stays legible side by side (matplotlib's tab10), cycled.
    << "set linetype 1 lc rgb '#1f77b4'\nset linetype 2 lc rgb '#d62728'\n"
    << "set linetype 3 lc rgb '#2ca02c'\nset linetype 4 lc rgb '#ff7f0e'\n"
    << "set linetype 5 lc rgb '#000000'\nset linetype 6 lc rgb '#9467bd'\n"
    << "set linetype 7 lc rgb '#8c564b'\nset linetype 8 lc rgb '#e377c2'\n"
    << "set linetype cycle 8\n"
    << "set key outside right top noenhanced\n";
  if (plot.log_x) {
    s << "set logscale x\n";
  } else {
    s << "set format x '%.0f'\n";  // 1000000, not 1x10^6
  }
  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& series = plot.series[i];
    s << "$d" << i << " << EOD\n";
    for (size_t j = 0; j < series.x.size() && j < series.y.size(); ++j) {
      s << series.x[j] << " " << series.y[j] << "\n";
    }
    s << "EOD\n";
  }
  s << "plot ";
  for (size_t i = 0; i < plot.series.size(); ++i) {
    if (i > 0) s << ", \\\n     ";
    s << "$d" << i << " using 1:2 with linespoints pointsize 0.6 lw 2 title "
      << Quote(plot.series[i].label);
  }
  s << "\nunset output\n";
  return s.str();
}

Status CheckGnuplot(const std::string& png_path) {
  if (!FindOnPath("gnuplot").empty()) return OkStatus();
  return FailedPreconditionError("gnuplot is not on PATH, cannot write " + png_path +
                                 " (Debian: apt-get install gnuplot-nox)");
}

Status WritePng(const LinePlot& plot, const std::string& png_path) {
  bool any_point = false;
  for (const PlotSeries& series : plot.series) any_point |= !series.x.empty();
  if (!any_point) return InvalidArgumentError("nothing to plot into " + png_path);
  STREAMD_RETURN_IF_ERROR(CheckGnuplot(png_path));
  const std::string gnuplot = FindOnPath("gnuplot");
  char err_path[] = "/tmp/streamd-gnuplot-XXXXXX";
  const int err_fd = mkstemp(err_path);
  if (err_fd < 0) return InternalError("cannot create a temporary file for gnuplot's errors");
  close(err_fd);
  const std::string command = ShellQuote(gnuplot) + " 2>" + ShellQuote(err_path);
  FILE* pipe = popen(command.c_str(), "w");
  if (pipe == nullptr) {
    std::remove(err_path);
    return InternalError("cannot start " + gnuplot);
  }
  std::remove(png_path.c_str());  // so a stale file cannot pass for a fresh one
  const std::string script = GnuplotScript(plot, png_path);
  const bool written = std::fwrite(script.data(), 1, script.size(), pipe) == script.size();
  const int status = pclose(pipe);
  std::string first_error;
  {
    std::ifstream err(err_path);
    std::string line;
    while (first_error.empty() && std::getline(err, line)) {
      if (line.find_first_not_of(" \t^") != std::string::npos) first_error = line;
    }
  }
  std::remove(err_path);
  if (!written || status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return InternalError("gnuplot failed writing " + png_path + " (exit status " +
                         std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")" +
                         (first_error.empty() ? "" : ": " + first_error));
  }
  struct stat st;
  if (stat(png_path.c_str(), &st) != 0 || st.st_size == 0) {
    return InternalError("gnuplot exited cleanly but wrote no " + png_path +
                         (first_error.empty() ? "" : ": " + first_error));
  }
  return OkStatus();
}

}  // namespace streamd::tools
