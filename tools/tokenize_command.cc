// `streamd tokenize`: the token ids of a text (or a file) as one JSON array line.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_path.h"

namespace streamd::tools {

int TokenizeCommand(int argc, char** argv) {
  std::string model_path = DefaultModelPath();
  std::string text, file;
  bool special = false, no_bos = false;
  FlagParser flags(
      "streamd tokenize [--model PATH] (--text T | --file F) [--special] [--no-bos]\n"
      "Prints the token ids of the text as one JSON array.");
  flags.String("model", &model_path, "GGUF model file (only its vocabulary is read)");
  flags.String("text", &text, "text to tokenize");
  flags.String("file", &file, "file whose bytes to tokenize");
  flags.Bool("special", &special, "parse special-token texts such as <|im_start|>");
  flags.Bool("no-bos", &no_bos, "never prepend BOS, even when the model asks for it");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (flags.was_set("text") == flags.was_set("file")) {
    return Fail(InvalidArgumentError("give exactly one of --text and --file"));
  }
  if (flags.was_set("file")) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return Fail(NotFoundError("cannot read --file " + file));
    std::ostringstream buf;
    buf << in.rdbuf();
    text = buf.str();
  }
  // Only the metadata: the vocabulary is all tokenizing needs, and a model whose weights
  // streamd cannot run (an unsupported tensor type) still tokenizes. Open()'s errors name the
  // path already.
  auto gguf = gguf::GgufFile::Open(model_path, gguf::GgufRead::kMetadataOnly);
  if (!gguf.ok()) return Fail(gguf.status());
  auto vocab = tokenizer::Tokenizer::FromGguf(**gguf);
  if (!vocab.ok()) return Fail(vocab.status(), model_path);
  auto ids = (*vocab)->Encode(text, (*vocab)->add_bos() && !no_bos, special);
  if (!ids.ok()) return Fail(ids.status(), flags.was_set("file") ? file : "--text");
  std::cout << nlohmann::json(*ids).dump() << std::endl;
  return 0;
}

}  // namespace streamd::tools
