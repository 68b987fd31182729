// `streamd generate`: one prompt, one completion, streamed to stdout as tokens are sampled.
// With --json the last line is a JSON object with token counts and prefill/decode speed.
// A client of the Engine like the server: one session, Append, Generate; the engine's scheduler
// runs the steps and its generation loop samples, detokenizes and matches the stop strings.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "engine/backends/cpu/llama_model.h"
#include "engine/backends/cpu/model_check.h"
#include "engine/build_plan/plan_binding.h"
#include "engine/cache/block_pool.h"
#include "engine/cache/session_cache.h"
#include "engine/core/engine.h"
#include "engine/sampling/stop_string_matcher.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "tools/model_path.h"

namespace streamd::tools {
namespace {

using tokenizer::ChatMessage;
using tokenizer::ChatTemplate;
using tokenizer::Tokenizer;

// Prompt tokens per forward pass: bounds the workspace, costs nothing in speed.
constexpr int32_t kPrefillChunk = 512;

// The generation's events, handed from the engine's scheduler thread (whose sinks must not
// block) to the main thread, which writes them to stdout.
class EventQueue {
 public:
  EventSink Sink() {
    return [this](GenerationEvent&& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(std::move(e));
      }
      cv_.notify_one();
    };
  }
  GenerationEvent Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !events_.empty(); });
    GenerationEvent e = std::move(events_.front());
    events_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
};

const char* StopReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfGeneration:
      return "eog";
    case FinishReason::kStop:
      return "stop";
    default:
      return "length";
  }
}

struct GenerateFlags {
  std::string model = DefaultModelPath();
  std::string prompt;
  std::string system;
  int64_t n = 128;
  int64_t threads = 0;
  int64_t k_quant_bits = 8;
  double temperature = 0.8, top_p = 0.95, min_p = 0.05, repeat_penalty = 1.0;
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  int64_t top_k = 40, repeat_last_n = 64, seed = 0;
  std::vector<std::string> stops;
  std::string cache = "dense";
  int64_t sinks = 4, window = 1020, block_size = 16;
  bool chat = false, special = false, json = false;
};

StatusOr<SamplingParams> ToSamplingParams(const GenerateFlags& f, int32_t vocab_size) {
  SamplingParams p;
  p.temperature = static_cast<float>(f.temperature);
  p.top_k = static_cast<int32_t>(f.top_k);
  p.top_p = static_cast<float>(f.top_p);
  p.min_p = static_cast<float>(f.min_p);
  p.repetition_penalty = static_cast<float>(f.repeat_penalty);
  p.presence_penalty = static_cast<float>(f.presence_penalty);
  p.frequency_penalty = static_cast<float>(f.frequency_penalty);
  p.penalty_last_n = static_cast<int32_t>(f.repeat_last_n);
  p.seed = static_cast<uint64_t>(f.seed);
  STREAMD_RETURN_IF_ERROR(ValidateSamplingParams(p, vocab_size));
  return p;
}

}  // namespace

int GenerateCommand(int argc, char** argv) {
  GenerateFlags f;
  FlagParser flags(
      "streamd generate --prompt TEXT [-n N] [--model PATH] [sampling flags] [--chat] [--json]\n"
      "Completes TEXT with the model, printing tokens as they are sampled.");
  flags.String("model", &f.model, "GGUF model file");
  flags.String("prompt", &f.prompt, "text to complete (required, not empty)");
  flags.Int("n-predict", &f.n, 1, 1 << 20, "tokens to generate at most");
  flags.Alias("-n", "n-predict");
  flags.Bool("chat", &f.chat, "wrap the prompt as a user turn in the model's chat template");
  flags.String("system", &f.system, "system message for --chat");
  flags.Bool("special", &f.special, "parse special-token texts such as <|im_end|> in the prompt");
  flags.Float("temperature", &f.temperature, 0.0, 100.0, "sampling temperature; 0 is greedy");
  flags.Alias("-t", "temperature");
  flags.Int("top-k", &f.top_k, 0, 1 << 24, "keep the k most likely tokens; 0 disables");
  flags.Float("top-p", &f.top_p, 1e-9, 1.0, "nucleus mass in (0, 1]; 1 disables");
  flags.Float("min-p", &f.min_p, 0.0, 1.0, "drop tokens below min-p times the top probability");
  flags.Float("repeat-penalty", &f.repeat_penalty, 1e-9, 10.0, "repetition penalty; 1 disables");
  flags.Float("presence-penalty", &f.presence_penalty, -2.0, 2.0, "presence penalty");
  flags.Float("frequency-penalty", &f.frequency_penalty, -2.0, 2.0, "frequency penalty");
  flags.Int("repeat-last-n", &f.repeat_last_n, 0, 1 << 20, "tokens the penalties look back on");
  flags.Int("seed", &f.seed, 0, INT64_MAX, "random seed; 0 picks one");
  flags.Strings("stop", &f.stops, "stop when the output contains this text");
  flags.String("cache", &f.cache,
               "KV cache: dense (bounded by the model context), sink (sinks + window, runs "
               "forever) or window (no sinks)");
  flags.Int("sinks", &f.sinks, 0, 1 << 20, "attention sinks kept forever (--cache sink)");
  flags.Int("window", &f.window, 1, 1 << 24, "most recent tokens kept (--cache sink|window)");
  flags.Int("block-size", &f.block_size, 1, kMaxBlockSize, "tokens per KV block");
  flags.Int("threads", &f.threads, 0, 256, "worker threads; 0 = all cores");
  flags.Int("k-quant-activation-bits", &f.k_quant_bits, 8, 12,
            "8: a K-quant file's matrices take 8-bit activations where that kernel is fast, as "
            "the daemon serves them without a plan (model.k_quant_activation_bits); or 12");
  flags.Bool("json", &f.json, "print one JSON object with counts and speed as the last line");
  if (Status s = flags.Parse(argc, argv, 2); !s.ok()) return Fail(s);
  if (flags.help_requested()) return PrintHelp(flags);
  if (f.prompt.empty())
    return Fail(InvalidArgumentError("--prompt is required and must not be empty"));

  if (f.k_quant_bits != 8 && f.k_quant_bits != 12) {
    return Fail(InvalidArgumentError(
        "--k-quant-activation-bits: " + std::to_string(f.k_quant_bits) + " is not one of 8, 12"));
  }
  auto model_or = LoadCpuModel(f.model, "", nullptr, nullptr, static_cast<int>(f.k_quant_bits));
  // Every problem of the file at once, the path named once (engine/backends/cpu/model_check.h).
  if (!model_or.ok()) return Fail(ExplainModelLoadFailure(f.model, model_or.status()));
  std::unique_ptr<LlamaModel> model = std::move(model_or).value();
  if (f.threads > 0) model->set_threads(static_cast<int32_t>(f.threads));
  const int32_t threads = model->threads();
  const LlamaConfig config = model->config();
  auto vocab_or = Tokenizer::FromGguf(model->file());
  if (!vocab_or.ok()) return Fail(vocab_or.status(), f.model);
  const Tokenizer& vocab = **vocab_or;
  auto params = ToSamplingParams(f, config.vocab_size);
  if (!params.ok()) return Fail(params.status());
  if (Status s = StopStringMatcher::Validate(f.stops); !s.ok()) return Fail(s);

  std::string text = f.prompt;
  bool parse_special = f.special;
  bool add_bos = vocab.add_bos();
  if (f.chat) {
    auto tmpl = ChatTemplate::FromGguf(model->file(), vocab);
    if (!tmpl.ok()) return Fail(tmpl.status(), f.model);
    if (tmpl->is_fallback()) {
      std::fprintf(stderr, "streamd: warning: %s\n", tmpl->fallback_reason().c_str());
    }
    add_bos = add_bos && !tmpl->renders_bos();  // the template writes BOS itself
    std::vector<ChatMessage> messages;
    if (!f.system.empty()) messages.push_back({"system", f.system});
    messages.push_back({"user", f.prompt});
    auto rendered = tmpl->Render(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) return Fail(rendered.status(), "--chat");
    text = std::move(rendered).value();
    parse_special = true;  // the template's own markers are special tokens
  }
  auto prompt_or = vocab.Encode(text, add_bos, parse_special);
  if (!prompt_or.ok()) return Fail(prompt_or.status(), "--prompt");
  const std::vector<int32_t>& prompt = *prompt_or;
  if (prompt.empty()) return Fail(InvalidArgumentError("--prompt encodes to no tokens"));
  auto mode = ParseCacheMode(f.cache);
  if (!mode.ok()) return Fail(mode.status(), "--cache");
  const int64_t needed = static_cast<int64_t>(prompt.size()) + f.n;
  if (*mode == CacheMode::kDense && needed > config.context_length) {
    return Fail(InvalidArgumentError(
        "the prompt (" + std::to_string(prompt.size()) + " tokens) plus -n " + std::to_string(f.n) +
        " is " + std::to_string(needed) + " tokens, over the model context of " +
        std::to_string(config.context_length)));
  }

  // One session: the pool holds exactly its worst case, its bound plus the prefill headroom of
  // one full chunk, and every step is that session's.
  const int32_t chunk = std::min(kPrefillChunk, config.context_length);
  const CacheSpec spec = SessionCache::Effective(
      {*mode, static_cast<int32_t>(f.sinks), static_cast<int32_t>(f.window), chunk},
      config.context_length);
  EngineConfig engine_config;
  engine_config.block_size = static_cast<int32_t>(f.block_size);
  engine_config.max_chunk = chunk;
  engine_config.planner.max_batch_tokens = chunk;
  engine_config.planner.max_batch_sessions = 1;
  const int32_t bound = SessionCache::BoundBlocks(spec, engine_config.block_size);
  const int32_t peak = SessionCache::PeakBlocks(spec, engine_config.block_size);
  engine_config.prefill_headroom_blocks = peak - bound;
  engine_config.pool_bytes =
      peak * BlockPool::BlockBytes(model->CacheShape(), engine_config.block_size);
  engine_config.max_sessions = 1;
  engine_config.default_mode = spec.mode;  // shares the budget between split pools (KvPools)
  engine_config.default_sinks = spec.sinks;
  engine_config.default_window = spec.window;
  engine_config.max_sinks = config.context_length;  // the flags' limits are the model's
  engine_config.max_window = config.context_length;
  auto engine_or = Engine::Create(std::move(model), std::move(vocab_or).value(), engine_config);
  if (!engine_or.ok()) return Fail(engine_or.status());
  Engine& engine = **engine_or;
  SessionOptions options;
  options.mode = *mode;
  options.sinks = static_cast<int32_t>(f.sinks);
  options.window = static_cast<int32_t>(f.window);
  options.sampling = *params;
  auto id = engine.Open(options);
  if (!id.ok()) return Fail(id.status(), "--cache");
  GenerateOptions generate;
  generate.max_tokens = static_cast<int32_t>(f.n);
  generate.stop = f.stops;
  EventQueue events;

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (Status s = engine.Append(*id, prompt); !s.ok()) return Fail(s, "--prompt");
  // The engine prefills an idle session's input but its last token, which the generation then
  // runs; waiting for that prefill to settle makes the steps (and so the logits, to the last
  // bit) the same on every run, whenever Generate would have caught the scheduler.
  while (true) {
    auto info = engine.Get(*id);
    if (!info.ok()) return Fail(info.status());
    if (info->pending_tokens <= 1) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (Status s = engine.Generate(*id, generate, events.Sink()); !s.ok()) return Fail(s);
  Clock::time_point t1 = t0;
  std::string stop_reason = "length";
  int64_t generated = 0;
  while (true) {
    const GenerationEvent e = events.Pop();
    if (e.kind == GenerationEvent::Kind::kToken) {
      if (generated++ == 0) t1 = Clock::now();
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
      continue;
    }
    if (e.reason == FinishReason::kError) return Fail(e.status);
    stop_reason = StopReason(e.reason);
    std::fwrite(e.tail_text.data(), 1, e.tail_text.size(), stdout);
    break;
  }
  if (generated == 0) t1 = Clock::now();
  std::fputc('\n', stdout);
  const auto t2 = Clock::now();
  if (Status s = engine.Close(*id); !s.ok()) return Fail(s);

  if (f.json) {
    // Prefill ends with the first token (the step of the prompt's last token and its sample);
    // decode is every later token.
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    nlohmann::json out = {
        {"prompt_tokens", prompt.size()},
        {"generated_tokens", generated},
        {"stop_reason", stop_reason},
        {"prefill_seconds", prefill_s},
        {"decode_seconds", decode_s},
        {"prefill_tokens_per_s", prompt.size() / prefill_s},
        {"decode_tokens_per_s", generated > 1 ? (generated - 1) / decode_s : 0.0},
        {"threads", threads},
    };
    std::cout << out.dump() << std::endl;
  }
  return 0;
}

}  // namespace streamd::tools
