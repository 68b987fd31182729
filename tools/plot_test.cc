#include "tools/plot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace streamd::tools {
namespace {

LinePlot TwoLines() {
  LinePlot plot;
  plot.title = "Austen's ppl";  // a quote gnuplot must see escaped
  plot.x_label = "tokens";
  plot.y_label = "nats";
  plot.series = {{"sink 4+252", {500, 1500}, {2.5, 2.6}}, {"window 256", {500, 1500}, {2.5, 6.0}}};
  return plot;
}

TEST(PlotTest, ScriptCarriesDataAndEscapesQuotes) {
  const std::string script = GnuplotScript(TwoLines(), "/tmp/it's.png");
  EXPECT_NE(script.find("set output '/tmp/it''s.png'"), std::string::npos);
  EXPECT_NE(script.find("set title 'Austen''s ppl'"), std::string::npos);
  EXPECT_NE(script.find("$d1 << EOD\n500 2.5\n1500 6\nEOD\n"), std::string::npos);
  EXPECT_NE(script.find("title 'window 256'"), std::string::npos);
}

TEST(PlotTest, EmptyPlotIsAnError) {
  LinePlot plot;
  EXPECT_EQ(WritePng(plot, "/tmp/never.png").code(), StatusCode::kInvalidArgument);
}

TEST(PlotTest, MissingGnuplotIsNamed) {
  const char* old = std::getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  setenv("PATH", "/nonexistent", 1);
  const Status s = WritePng(TwoLines(), "/tmp/never.png");
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("gnuplot"), std::string::npos);
}

TEST(PlotTest, WritesPngWhenGnuplotIsInstalled) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "gnuplot is not installed";
  }
  const std::string path = ::testing::TempDir() + "/plot_test.png";
  ASSERT_TRUE(WritePng(TwoLines(), path).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1000);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace streamd::tools
