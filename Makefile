# The two commands of the README. Both install what is missing, build, fetch the default model
# and are quick when everything is already in place.
#   make run    -> the daemon (streamd serve) with the default model, on localhost
#   make test   -> every test (ctest, then a bounded libFuzzer run: make fuzz-smoke)
#   make sanitize -> the unit tests under ASan+UBSan and TSan (CI runs it after make test)
BUILD_DIR ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# Unity builds (CMakeLists.txt, STREAMD_UNITY_BUILD): a clean build in well under half the time.
# Read when the build directory is first configured; UNITY=OFF compiles file by file.
UNITY ?= ON
# Ninja (scripts/install-deps.sh installs it) starts any target's compiles as soon as their own
# inputs exist; Unix Makefiles wait for the libraries a target links to be built first, which
# leaves a core idle for a third of a clean build on 2 cores. Read when the build directory is
# first configured, like UNITY.
GENERATOR ?= Ninja
# The test programs' own sources at -O1 (the code under test keeps the build type's -O3): a
# seventh less to compile in a clean build, and the tests took as long to run (ctest 313 and
# 315 s on 2 cores). Read when the build directory is first configured.
TEST_COMPILE_OPTIONS ?= -O1
MODEL_DIR ?= $(HOME)/.cache/streamd/models
MODEL ?= $(MODEL_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf
# The real Qwen2.5-Coder-Instruct Q4_K_M files of the qwen2 golden tests: the 0.5B (~480 MB) and
# the held-out 1.5B (~1.1 GB).
QWEN_MODEL ?= $(MODEL_DIR)/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
QWEN15_MODEL ?= $(MODEL_DIR)/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
# The real Gemma 3 270M (base) Q4_K_M file of the gemma3 golden tests (~250 MB; Gemma Terms of Use,
# fetched, never committed).
GEMMA_MODEL ?= $(MODEL_DIR)/gemma-3-270m-q4_k_m.gguf
CONFIG ?= config/streamd.yaml
# The OpenAI-compatible HTTP API of `make run` (docs/HTTP.md); off by default in the config, so
# that tests and deployments opt in. HTTP_ADDRESS= turns it off here too.
HTTP_ADDRESS ?= 127.0.0.1:8080

.PHONY: all deps configure build model qwen-model gemma-model vocab quant-variants test fuzz-smoke sanitize lint format run clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DSTREAMD_UNITY_BUILD=$(UNITY) "-DSTREAMD_TEST_COMPILE_OPTIONS=$(TEST_COMPILE_OPTIONS)" \
	  $(CMAKE_FLAGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

model: deps
	@STREAMD_MODEL_DIR=$(MODEL_DIR) scripts/fetch-model.sh >/dev/null

qwen-model: deps
	@STREAMD_MODEL_DIR=$(MODEL_DIR) scripts/fetch-qwen-model.sh 0.5b >/dev/null
	@STREAMD_MODEL_DIR=$(MODEL_DIR) scripts/fetch-qwen-model.sh 1.5b >/dev/null

gemma-model: deps
	@STREAMD_MODEL_DIR=$(MODEL_DIR) scripts/fetch-gemma-model.sh >/dev/null

# The SentencePiece vocabulary the llama-vocabulary tokenizer tests read, and llama.cpp's test
# vocabularies with their test vectors for the golden tokenizer test (one ~75 MB download).
vocab: deps
	@scripts/fetch-test-vocab.sh >/dev/null
	@scripts/fetch-test-vocab.sh --golden >/dev/null

# The venv with the `gguf` package that the dequantizer tests compare with, made once before the
# tests run (they run in parallel and must not each make it).
GGUF_VENV ?= $(HOME)/.cache/streamd/gguf-venv

# The default model requantized to Q5_0 and Q5_1 by the gguf package's numpy quantizer (about
# 20 s), with Llama 3.1's rope_freqs tensor added (LLAMA3_ROPE) and rewritten as a qwen3 file
# (QWEN3_ARCH; a second each), for
# tests/quant_variants_golden_test.cc; each file's sha256 is checked against its
# llama.cpp fixture. The K-quant and IQ4 variants need llama.cpp's llama-quantize (a 6-10 minute
# build): `scripts/make-quant-variants.sh` makes them all, and their tests skip without them.
QUANT_VARIANTS ?= $(MODEL_DIR)/quant-variants
CI_QUANT_TYPES ?= Q5_0 Q5_1 LLAMA3_ROPE QWEN3_ARCH
quant-variants: model
	@STREAMD_MODEL=$(MODEL) STREAMD_QUANT_VARIANTS=$(QUANT_VARIANTS) \
	  STREAMD_GGUF_PYTHON=$$(tests/reference/gguf-venv.sh $(GGUF_VENV) | tail -n 1) \
	  scripts/make-quant-variants.sh $(CI_QUANT_TYPES) >/dev/null

# The tests' temporary files (gtest's TempDir(): TEST_TMPDIR) go into the build directory, so
# that two checkouts or builds testing at once on one host never share a file name in /tmp.
test: build model qwen-model gemma-model vocab quant-variants
	@mkdir -p $(BUILD_DIR)/test-tmp
	TEST_TMPDIR=$(abspath $(BUILD_DIR))/test-tmp \
	  STREAMD_MODEL=$(MODEL) STREAMD_QWEN_MODEL=$(QWEN_MODEL) STREAMD_QWEN15_MODEL=$(QWEN15_MODEL) \
	  STREAMD_GEMMA_MODEL=$(GEMMA_MODEL) \
	  STREAMD_QUANT_VARIANTS=$(QUANT_VARIANTS) \
	  STREAMD_SPM_VOCAB=$$(scripts/fetch-test-vocab.sh) \
	  STREAMD_VOCAB_DIR=$$(scripts/fetch-test-vocab.sh --golden) \
	  STREAMD_GGUF_PYTHON=$$(tests/reference/gguf-venv.sh $(GGUF_VENV) | tail -n 1) \
	  ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory fuzz-smoke

# The libFuzzer targets (GGUF, snapshot and build-plan readers, tokenizer, chat template, the
# session handler's ClientMessages), built with clang in build-fuzz/ and run for FUZZ_SECONDS
# each, two at a time (default 30: about 4 minutes in all on 2 cores, the build included).
fuzz-smoke: deps model vocab
	JOBS=$(JOBS) STREAMD_MODEL=$(MODEL) STREAMD_SPM_VOCAB=$$(scripts/fetch-test-vocab.sh) \
	  scripts/fuzz-smoke.sh

# The unit tests of kernels/, engine/ and server/ under ASan+UBSan (build-asan/), and those that
# run threads under TSan (build-tsan/); docs/TESTING.md. SANITIZERS=asan or tsan runs one.
SANITIZERS ?= all
# The code's shape, checked in seconds (CI runs it first): every C++/CUDA file formatted as
# .clang-format says (clang-format 14, Debian 12's), and server/ and tools/streamctl including
# only what the transports may drive of the engine (scripts/check-engine-includes.sh).
# `make format` rewrites the files in place.
FORMAT_FILES = $$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
lint: deps
	@scripts/check-engine-includes.sh
	@clang-format --dry-run --Werror $(FORMAT_FILES) && echo "clang-format: every file is formatted"

format: deps
	@clang-format -i $(FORMAT_FILES)

sanitize: deps model gemma-model vocab
	JOBS=$(JOBS) STREAMD_MODEL=$(MODEL) STREAMD_SPM_VOCAB=$$(scripts/fetch-test-vocab.sh) \
	  STREAMD_GEMMA_MODEL=$(GEMMA_MODEL) \
	  STREAMD_VOCAB_DIR=$$(scripts/fetch-test-vocab.sh --golden) \
	  STREAMD_GGUF_PYTHON=$$(tests/reference/gguf-venv.sh $(GGUF_VENV) | tail -n 1) \
	  scripts/sanitize-check.sh $(SANITIZERS)

# The model's build plan for this machine (docs/BUILD.md), made once beside the model and kept
# while it matches the model, the streamd version and the machine; a build that would take over
# BUILD_SECONDS (two minutes) is given up, and the daemon runs with the built-in defaults. With
# an eval text (the team's shared one when it is there, or EVAL_TEXT=F) the build may take
# precision cuts that its eval gate measures on it; without one, only choices that change no
# logit. The build
# prints its stages and their times on stderr (load, tune, eval gate, calibrate, time steps,
# write), so the first run is not silent while it works. BUILD_SECONDS bounds it: the default
# model's build takes about a minute on 2 cores; a 0.5B model's (Qwen2.5-Coder-0.5B Q4_K_M) about
# three (make run MODEL=... BUILD_SECONDS=400).
PLAN ?= $(MODEL:.gguf=.plan)
BUILD_SECONDS ?= 120
EVAL_TEXT ?= $(wildcard ../shared/data/pride-and-prejudice.txt)
run: build model
	@echo "make run: the build plan for this machine ($(PLAN)): kept if current, else built now"; \
	echo "  (streamd build: about a minute on 2 cores for the default model; given up past" \
	  "$(BUILD_SECONDS) s, BUILD_SECONDS=N)"; \
	if $(BUILD_DIR)/tools/streamd build --model $(MODEL) --out $(PLAN) --reuse \
	    --max-seconds $(BUILD_SECONDS) \
	    $(if $(EVAL_TEXT),--eval-text $(EVAL_TEXT)) --quiet; then \
	  echo "make run: serving with the build plan $(PLAN) (streamd build; docs/BUILD.md)"; \
	  plan="--plan $(PLAN)"; \
	else \
	  echo "make run: no build plan (streamd build did not finish); the built-in defaults"; \
	  plan=""; \
	fi; \
	exec $(BUILD_DIR)/tools/streamd serve --config $(CONFIG) --model.path=$(MODEL) \
	  --server.http_address=$(HTTP_ADDRESS) $$plan

clean:
	rm -rf $(BUILD_DIR) build-fuzz build-asan build-tsan
