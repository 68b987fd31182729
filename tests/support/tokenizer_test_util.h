// Test-only helpers: the real vocabularies the tokenizer tests run against, loaded once.
//
// $STREAMD_MODEL is the default model (SmolLM2, byte-level BPE); $STREAMD_SPM_VOCAB is
// llama.cpp's ggml-vocab-llama-spm.gguf (scripts/fetch-test-vocab.sh prints its path).
// `make test` sets both. A test that needs one fails, never passes silently, when it is unset.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "engine/gguf/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_env.h"

namespace streamd::tokenizer::testing {

struct LoadedVocab {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
};

// $STREAMD_VOCAB_DIR, or "" after recording a failure that says how to set it.
inline std::string VocabDirOrFail() {
  return streamd::testing::EnvOrFail("STREAMD_VOCAB_DIR", "scripts/fetch-test-vocab.sh --golden");
}

// Opens the GGUF named by $`env` and builds its tokenizer, or says in `*error` why not.
inline std::unique_ptr<LoadedVocab> LoadFromEnv(const char* env, const char* how_to_set,
                                                std::string* error) {
  const char* path = std::getenv(env);
  if (path == nullptr || *path == '\0') {
    *error = std::string(env) + " is not set: run the tests with `make test`, or " + how_to_set;
    return nullptr;
  }
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) {
    *error = std::string(env) + "=" + path + ": " + file.status().ToString();
    return nullptr;
  }
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    *error = std::string(env) + "=" + path + ": " + tok.status().ToString();
    return nullptr;
  }
  return std::make_unique<LoadedVocab>(LoadedVocab{std::move(*file), std::move(*tok)});
}

// Loads once per process (lives for the whole run); every test that asks for a missing
// vocabulary records the same failure with instructions.
inline const LoadedVocab* CachedFromEnv(const char* env, const char* how_to_set) {
  struct Cached {
    std::unique_ptr<LoadedVocab> vocab;
    std::string error;
  };
  static std::map<std::string, Cached>* cache = new std::map<std::string, Cached>();
  auto [it, inserted] = cache->try_emplace(env);
  if (inserted) it->second.vocab = LoadFromEnv(env, how_to_set, &it->second.error);
  if (it->second.vocab == nullptr) ADD_FAILURE() << it->second.error;
  return it->second.vocab.get();
}

// SmolLM2's tokenizer (byte-level BPE, pre-tokenizer "smollm").
inline const LoadedVocab* SmolLm2() {
  return CachedFromEnv("STREAMD_MODEL", "export STREAMD_MODEL=$(scripts/fetch-model.sh)");
}

// llama.cpp's LLaMA SentencePiece test vocabulary.
inline const LoadedVocab* LlamaSpm() {
  return CachedFromEnv("STREAMD_SPM_VOCAB",
                       "export STREAMD_SPM_VOCAB=$(scripts/fetch-test-vocab.sh)");
}

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace streamd::tokenizer::testing
