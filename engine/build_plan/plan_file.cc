#include "engine/build_plan/plan_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "engine/cache/kv_scales.h"
#include "engine/util/atomic_file.h"

namespace streamd {
namespace {

using nlohmann::json;

// ---- header ----------------------------------------------------------------------------------

void PutU32(uint8_t* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* at, uint64_t v) {
  for (int i = 0; i < 8; ++i) at[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | at[i];
  return v;
}
uint64_t GetU64(const uint8_t* at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | at[i];
  return v;
}

// Header fields, at their byte offsets.
constexpr size_t kAtVersion = 8, kAtManifestOffset = 16, kAtManifestBytes = 24,
                 kAtManifestHash = 32, kAtWeightsOffset = 40, kAtWeightsBytes = 48,
                 kAtWeightsHash = 56;

// ---- manifest fields ---------------------------------------------------------------------------

// The layout names the parts the weights hold, and each part it names is there: AMX copies are
// the first amx_bytes (a multiple of 64, so the 8-bit copies after them stay aligned), the
// 8-bit copies the rest.
Status CheckWeightsLayout(const BuildPlan& p) {
  const std::string& l = p.weights_layout;
  if (l != "none" && l != "amx-packed" && l != "vnni8-packed" && l != "amx-packed+vnni8-packed") {
    return InvalidArgumentError("weights.layout \"" + l +
                                "\" is not one of none, amx-packed, vnni8-packed, "
                                "amx-packed+vnni8-packed");
  }
  if (p.amx_bytes > p.weights_bytes || p.amx_bytes % 64 != 0) {
    return InvalidArgumentError(
        "weights.amx_bytes = " + std::to_string(p.amx_bytes) +
        " must be a multiple of 64 within weights.bytes = " + std::to_string(p.weights_bytes));
  }
  const bool amx = l.find("amx-packed") != std::string::npos;
  const bool vnni8 = l.find("vnni8-packed") != std::string::npos;
  if (amx != (p.amx_bytes > 0) || vnni8 != (p.weights_bytes > p.amx_bytes)) {
    return InvalidArgumentError("weights.layout \"" + l + "\" with " + std::to_string(p.amx_bytes) +
                                " AMX bytes of " + std::to_string(p.weights_bytes));
  }
  return OkStatus();
}

// Reads one field of a JSON object with its type checked; `at` is the field's dotted name for
// errors ("tuning.split[2].max_rows").
class Fields {
 public:
  Fields(const json& object, std::string at) : o_(object), at_(std::move(at)) {}

  Status String(const char* key, std::string* out) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_string()) return Wrong(key, "a string");
    *out = v->get<std::string>();
    return OkStatus();
  }
  Status Bool(const char* key, bool* out) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_boolean()) return Wrong(key, "true or false");
    *out = v->get<bool>();
    return OkStatus();
  }
  Status Number(const char* key, double* out) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_number() || !std::isfinite(v->get<double>())) return Wrong(key, "a finite number");
    *out = v->get<double>();
    return OkStatus();
  }
  template <class Int>
  Status Integer(const char* key, Int* out, int64_t lo, int64_t hi) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_number_integer()) return Wrong(key, "an integer");
    const int64_t x = v->is_number_unsigned()
                          ? (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                                 ? INT64_MAX
                                 : static_cast<int64_t>(v->get<uint64_t>()))
                          : v->get<int64_t>();
    if (x < lo || x > hi) {
      return InvalidArgumentError(Name(key) + " = " + v->dump() + " is outside [" +
                                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = static_cast<Int>(x);
    return OkStatus();
  }
  StatusOr<const json*> Object(const char* key) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_object()) return Wrong(key, "an object");
    return v;
  }
  StatusOr<const json*> Array(const char* key, size_t max) const {
    STREAMD_ASSIGN_OR_RETURN(const json* v, Find(key));
    if (!v->is_array()) return Wrong(key, "an array");
    if (v->size() > max) {
      return InvalidArgumentError(Name(key) + " has " + std::to_string(v->size()) +
                                  " entries; at most " + std::to_string(max) + " are allowed");
    }
    return v;
  }
  std::string Name(const char* key) const { return at_.empty() ? key : at_ + "." + key; }

 private:
  StatusOr<const json*> Find(const char* key) const {
    const auto it = o_.find(key);
    if (it == o_.end()) return InvalidArgumentError(Name(key) + " is missing");
    return &*it;
  }
  Status Wrong(const char* key, const char* expected) const {
    return InvalidArgumentError(Name(key) + " must be " + expected);
  }
  const json& o_;
  std::string at_;
};

json TuningJson(const CpuTuning& t) {
  json split = json::array();
  for (int b = 0; b < kTokenBuckets; ++b) {
    split.push_back({{"tokens", TokenBucketName(b)},
                     {"items_per_thread", t.split[b].items_per_thread},
                     {"min_rows", t.split[b].min_rows},
                     {"max_rows", t.split[b].max_rows}});
  }
  json isa = json::array();
  for (const ShapeIsa& s : t.isa) {
    isa.push_back({{"type", WeightTypeName(s.type)},
                   {"rows", s.rows},
                   {"cols", s.cols},
                   {"bucket", s.bucket},
                   {"isa", kernels::cpu::IsaName(s.isa)},
                   {"activation_bits", s.activation_bits}});
  }
  return {{"threads", t.threads},
          {"attention_batch_factor", t.attention_batch_factor},
          {"attention_prefetch_runs", t.attention_prefetch_runs},
          {"decode_by_tokens_from", t.decode_by_tokens_from},
          {"split", split},
          {"isa", isa}};
}

StatusOr<CpuTuning> ParseTuning(const json& j) {
  CpuTuning t;
  const Fields f(j, "tuning");
  STREAMD_RETURN_IF_ERROR(f.Integer("threads", &t.threads, 0, 4096));
  STREAMD_RETURN_IF_ERROR(
      f.Integer("attention_batch_factor", &t.attention_batch_factor, 1, 1 << 20));
  STREAMD_RETURN_IF_ERROR(f.Integer("attention_prefetch_runs", &t.attention_prefetch_runs, 0,
                                    kernels::cpu::kMaxPrefetchRuns));
  STREAMD_RETURN_IF_ERROR(f.Integer("decode_by_tokens_from", &t.decode_by_tokens_from, 0, 1 << 20));
  STREAMD_ASSIGN_OR_RETURN(const json* split, f.Array("split", kTokenBuckets));
  if (split->size() != kTokenBuckets) {
    return InvalidArgumentError("tuning.split has " + std::to_string(split->size()) +
                                " entries; it must have one per token bucket (" +
                                std::to_string(kTokenBuckets) + ")");
  }
  for (int b = 0; b < kTokenBuckets; ++b) {
    const json& s = (*split)[b];
    const std::string at = "tuning.split[" + std::to_string(b) + "]";
    if (!s.is_object()) return InvalidArgumentError(at + " must be an object");
    const Fields fs(s, at);
    STREAMD_RETURN_IF_ERROR(fs.Integer("items_per_thread", &t.split[b].items_per_thread, 1, 64));
    STREAMD_RETURN_IF_ERROR(fs.Integer("min_rows", &t.split[b].min_rows, 1, 1 << 20));
    STREAMD_RETURN_IF_ERROR(fs.Integer("max_rows", &t.split[b].max_rows, 1, 1 << 20));
  }
  STREAMD_ASSIGN_OR_RETURN(const json* isa, f.Array("isa", 4096));
  for (size_t i = 0; i < isa->size(); ++i) {
    const json& s = (*isa)[i];
    const std::string at = "tuning.isa[" + std::to_string(i) + "]";
    if (!s.is_object()) return InvalidArgumentError(at + " must be an object");
    const Fields fs(s, at);
    ShapeIsa choice;
    std::string type, level;
    STREAMD_RETURN_IF_ERROR(fs.String("type", &type));
    STREAMD_RETURN_IF_ERROR(fs.String("isa", &level));
    auto parsed_type = ParseWeightType(type);
    if (!parsed_type.ok())
      return InvalidArgumentError(at + ".type: " + parsed_type.status().message());
    auto parsed_isa = ParseIsa(level);
    if (!parsed_isa.ok())
      return InvalidArgumentError(at + ".isa: " + parsed_isa.status().message());
    choice.type = *parsed_type;
    choice.isa = *parsed_isa;
    STREAMD_RETURN_IF_ERROR(fs.Integer("rows", &choice.rows, 1, int64_t{1} << 31));
    STREAMD_RETURN_IF_ERROR(fs.Integer("cols", &choice.cols, 1, int64_t{1} << 31));
    STREAMD_RETURN_IF_ERROR(fs.Integer("bucket", &choice.bucket, 0, kTokenBuckets - 1));
    STREAMD_RETURN_IF_ERROR(fs.Integer("activation_bits", &choice.activation_bits, 8, 12));
    t.isa.push_back(choice);
  }
  STREAMD_RETURN_IF_ERROR(ValidateCpuTuning(t));
  return t;
}

json HardwareJson(const HardwareFingerprint& h) {
  return {{"kind", h.kind},
          {"vendor", h.vendor},
          {"model", h.model},
          {"isa_flags", h.isa_flags},
          {"kernel_level", h.kernel_level},
          {"cpus", h.cpus}};
}

StatusOr<HardwareFingerprint> ParseHardware(const json& j) {
  HardwareFingerprint h;
  const Fields f(j, "hardware");
  STREAMD_RETURN_IF_ERROR(f.String("kind", &h.kind));
  STREAMD_RETURN_IF_ERROR(f.String("vendor", &h.vendor));
  STREAMD_RETURN_IF_ERROR(f.String("model", &h.model));
  STREAMD_RETURN_IF_ERROR(f.String("kernel_level", &h.kernel_level));
  STREAMD_RETURN_IF_ERROR(f.Integer("cpus", &h.cpus, 1, 1 << 20));
  STREAMD_ASSIGN_OR_RETURN(const json* flags, f.Array("isa_flags", 256));
  for (const json& flag : *flags) {
    if (!flag.is_string()) return InvalidArgumentError("hardware.isa_flags must hold strings");
    h.isa_flags.push_back(flag.get<std::string>());
  }
  return h;
}

json KvCacheJson(const PlanKvCache& kv) {
  return {{"dtype", kv.dtype},
          {"n_layers", kv.n_layers},
          {"n_kv_heads", kv.n_kv_heads},
          {"head_dim", kv.head_dim},
          {"k_scales", kv.k_scales},
          {"v_scales", kv.v_scales},
          {"calibration_text", kv.calibration_text},
          {"calibration_tokens", kv.calibration_tokens}};
}

// An int8 cache's scales must be what KvInt8Scales takes (a size per shape, finite, > 0); an f16
// cache has none.
StatusOr<PlanKvCache> ParseKvCache(const json& j) {
  PlanKvCache kv;
  const Fields f(j, "kv_cache");
  STREAMD_RETURN_IF_ERROR(f.String("dtype", &kv.dtype));
  if (kv.dtype != "f16" && kv.dtype != "int8") {
    return InvalidArgumentError("kv_cache.dtype \"" + kv.dtype + "\" is not f16 or int8");
  }
  STREAMD_RETURN_IF_ERROR(f.Integer("n_layers", &kv.n_layers, 0, 4096));
  STREAMD_RETURN_IF_ERROR(f.Integer("n_kv_heads", &kv.n_kv_heads, 0, 4096));
  STREAMD_RETURN_IF_ERROR(f.Integer("head_dim", &kv.head_dim, 0, 4096));
  STREAMD_RETURN_IF_ERROR(f.String("calibration_text", &kv.calibration_text));
  STREAMD_RETURN_IF_ERROR(f.Integer("calibration_tokens", &kv.calibration_tokens, 0, INT64_MAX));
  // The manifest's size cap bounds the arrays; a float needs at least 2 bytes of JSON.
  for (const auto& [key, out] :
       {std::pair<const char*, std::vector<float>*>{"k_scales", &kv.k_scales},
        {"v_scales", &kv.v_scales}}) {
    STREAMD_ASSIGN_OR_RETURN(const json* a, f.Array(key, kMaxPlanManifestBytes / 2));
    out->reserve(a->size());
    for (const json& x : *a) {
      if (!x.is_number()) return InvalidArgumentError(f.Name(key) + " must hold numbers");
      out->push_back(x.get<float>());
    }
  }
  if (kv.dtype == "f16") {
    if (!kv.k_scales.empty() || !kv.v_scales.empty()) {
      return InvalidArgumentError("kv_cache: an f16 cache has no scales");
    }
    return kv;
  }
  auto scales =
      KvInt8Scales::Make(kv.n_layers, kv.n_kv_heads, kv.head_dim, kv.k_scales, kv.v_scales);
  if (!scales.ok()) return InvalidArgumentError("kv_cache: " + scales.status().message());
  return kv;
}

}  // namespace

std::string PlanManifestJson(const BuildPlan& p) {
  json precision = json::array();
  for (const PrecisionDecision& d : p.precision) {
    precision.push_back({{"name", d.name},
                         {"accepted", d.accepted},
                         {"baseline_ppl", d.baseline_ppl},
                         {"ppl", d.ppl},
                         {"increase_pct", d.increase_pct},
                         {"max_increase_pct", d.max_increase_pct},
                         {"eval_text", d.eval_text},
                         {"eval_tokens", d.eval_tokens}});
  }
  json measurements = json::array();
  for (const PlanMeasurement& m : p.measurements) {
    measurements.push_back({{"what", m.what}, {"value", m.value}, {"unit", m.unit}});
  }
  const json j = {
      {"format_version", p.format_version},
      {"streamd_version", p.streamd_version},
      {"target", p.target},
      {"model",
       {{"fingerprint", p.model_fingerprint}, {"name", p.model_name}, {"path", p.model_path}}},
      {"hardware", HardwareJson(p.hardware)},
      {"built_at", p.built_at},
      {"build_seconds", p.build_seconds},
      {"tuning", TuningJson(p.tuning)},
      {"weights",
       {{"layout", p.weights_layout}, {"bytes", p.weights_bytes}, {"amx_bytes", p.amx_bytes}}},
      {"kv_cache", KvCacheJson(p.kv_cache)},
      {"precision", precision},
      {"measurements", measurements}};
  // Invalid UTF-8 in a string (a model path) is replaced rather than thrown on.
  return j.dump(2, ' ', false, json::error_handler_t::replace);
}

StatusOr<BuildPlan> ParsePlanManifest(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError("the manifest is not valid JSON");
  if (!j.is_object()) return InvalidArgumentError("the manifest is not a JSON object");
  BuildPlan p;
  const Fields f(j, "");
  STREAMD_RETURN_IF_ERROR(f.Integer("format_version", &p.format_version, 0, INT32_MAX));
  if (p.format_version != kPlanFormatVersion) {
    return InvalidArgumentError("manifest format_version " + std::to_string(p.format_version) +
                                " differs from the header's " + std::to_string(kPlanFormatVersion));
  }
  STREAMD_RETURN_IF_ERROR(f.String("streamd_version", &p.streamd_version));
  STREAMD_RETURN_IF_ERROR(f.String("target", &p.target));
  if (p.target != "cpu") {
    return InvalidArgumentError("target \"" + p.target + "\" is not one this streamd runs (cpu)");
  }
  STREAMD_ASSIGN_OR_RETURN(const json* model, f.Object("model"));
  const Fields fm(*model, "model");
  STREAMD_RETURN_IF_ERROR(fm.String("fingerprint", &p.model_fingerprint));
  STREAMD_RETURN_IF_ERROR(fm.String("name", &p.model_name));
  STREAMD_RETURN_IF_ERROR(fm.String("path", &p.model_path));
  STREAMD_ASSIGN_OR_RETURN(const json* hardware, f.Object("hardware"));
  STREAMD_ASSIGN_OR_RETURN(p.hardware, ParseHardware(*hardware));
  STREAMD_RETURN_IF_ERROR(f.String("built_at", &p.built_at));
  STREAMD_RETURN_IF_ERROR(f.Number("build_seconds", &p.build_seconds));
  STREAMD_ASSIGN_OR_RETURN(const json* tuning, f.Object("tuning"));
  STREAMD_ASSIGN_OR_RETURN(p.tuning, ParseTuning(*tuning));
  STREAMD_ASSIGN_OR_RETURN(const json* weights, f.Object("weights"));
  const Fields fw(*weights, "weights");
  STREAMD_RETURN_IF_ERROR(fw.String("layout", &p.weights_layout));
  STREAMD_RETURN_IF_ERROR(fw.Integer("bytes", &p.weights_bytes, 0, INT64_MAX));
  STREAMD_RETURN_IF_ERROR(fw.Integer("amx_bytes", &p.amx_bytes, 0, INT64_MAX));
  STREAMD_RETURN_IF_ERROR(CheckWeightsLayout(p));
  STREAMD_ASSIGN_OR_RETURN(const json* kv_cache, f.Object("kv_cache"));
  STREAMD_ASSIGN_OR_RETURN(p.kv_cache, ParseKvCache(*kv_cache));
  STREAMD_ASSIGN_OR_RETURN(const json* precision, f.Array("precision", 64));
  for (size_t i = 0; i < precision->size(); ++i) {
    const json& d = (*precision)[i];
    const std::string at = "precision[" + std::to_string(i) + "]";
    if (!d.is_object()) return InvalidArgumentError(at + " must be an object");
    const Fields fd(d, at);
    PrecisionDecision out;
    STREAMD_RETURN_IF_ERROR(fd.String("name", &out.name));
    STREAMD_RETURN_IF_ERROR(fd.Bool("accepted", &out.accepted));
    STREAMD_RETURN_IF_ERROR(fd.Number("baseline_ppl", &out.baseline_ppl));
    STREAMD_RETURN_IF_ERROR(fd.Number("ppl", &out.ppl));
    STREAMD_RETURN_IF_ERROR(fd.Number("increase_pct", &out.increase_pct));
    STREAMD_RETURN_IF_ERROR(fd.Number("max_increase_pct", &out.max_increase_pct));
    STREAMD_RETURN_IF_ERROR(fd.String("eval_text", &out.eval_text));
    STREAMD_RETURN_IF_ERROR(fd.Integer("eval_tokens", &out.eval_tokens, 0, INT64_MAX));
    p.precision.push_back(std::move(out));
  }
  STREAMD_ASSIGN_OR_RETURN(const json* measurements, f.Array("measurements", 100000));
  for (size_t i = 0; i < measurements->size(); ++i) {
    const json& m = (*measurements)[i];
    const std::string at = "measurements[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidArgumentError(at + " must be an object");
    const Fields fm2(m, at);
    PlanMeasurement out;
    STREAMD_RETURN_IF_ERROR(fm2.String("what", &out.what));
    STREAMD_RETURN_IF_ERROR(fm2.Number("value", &out.value));
    STREAMD_RETURN_IF_ERROR(fm2.String("unit", &out.unit));
    p.measurements.push_back(std::move(out));
  }
  return p;
}

std::vector<uint8_t> SerializePlan(BuildPlan plan, std::span<const uint8_t> weights) {
  plan.weights_bytes = weights.size();
  const std::string manifest = PlanManifestJson(plan);
  const uint64_t manifest_offset = kPlanHeaderBytes;
  const uint64_t manifest_end = manifest_offset + manifest.size();
  const uint64_t weights_offset =
      (manifest_end + kPlanWeightsAlignment - 1) / kPlanWeightsAlignment * kPlanWeightsAlignment;
  std::vector<uint8_t> out(weights_offset + weights.size(), 0);
  std::memcpy(out.data(), kPlanMagic, sizeof kPlanMagic);
  PutU32(&out[kAtVersion], kPlanFormatVersion);
  PutU32(&out[kAtVersion + 4], static_cast<uint32_t>(kPlanHeaderBytes));
  PutU64(&out[kAtManifestOffset], manifest_offset);
  PutU64(&out[kAtManifestBytes], manifest.size());
  PutU64(&out[kAtManifestHash], XXH3_64bits(manifest.data(), manifest.size()));
  PutU64(&out[kAtWeightsOffset], weights_offset);
  PutU64(&out[kAtWeightsBytes], weights.size());
  PutU64(&out[kAtWeightsHash], XXH3_64bits(weights.data(), weights.size()));
  std::memcpy(&out[manifest_offset], manifest.data(), manifest.size());
  if (!weights.empty()) std::memcpy(&out[weights_offset], weights.data(), weights.size());
  return out;
}

StatusOr<ParsedPlan> ParsePlanBytes(std::span<const uint8_t> bytes) {
  if (bytes.size() < kPlanHeaderBytes) {
    return InvalidArgumentError("truncated: " + std::to_string(bytes.size()) +
                                " bytes, shorter than the " + std::to_string(kPlanHeaderBytes) +
                                "-byte header");
  }
  if (std::memcmp(bytes.data(), kPlanMagic, sizeof kPlanMagic) != 0) {
    return InvalidArgumentError("not a streamd plan (no STRMPLAN magic)");
  }
  const uint32_t version = GetU32(&bytes[kAtVersion]);
  if (version != kPlanFormatVersion) {
    return InvalidArgumentError("plan format version " + std::to_string(version) +
                                "; this streamd reads version " +
                                std::to_string(kPlanFormatVersion) + " (rebuild the plan)");
  }
  if (GetU32(&bytes[kAtVersion + 4]) != kPlanHeaderBytes) {
    return InvalidArgumentError("corrupt: the header claims " +
                                std::to_string(GetU32(&bytes[kAtVersion + 4])) +
                                " bytes; headers are " + std::to_string(kPlanHeaderBytes));
  }
  const uint64_t size = bytes.size();
  const uint64_t m_off = GetU64(&bytes[kAtManifestOffset]);
  const uint64_t m_len = GetU64(&bytes[kAtManifestBytes]);
  const uint64_t w_off = GetU64(&bytes[kAtWeightsOffset]);
  const uint64_t w_len = GetU64(&bytes[kAtWeightsBytes]);
  if (m_len > kMaxPlanManifestBytes) {
    return InvalidArgumentError("the manifest claims " + std::to_string(m_len) +
                                " bytes; at most " + std::to_string(kMaxPlanManifestBytes) +
                                " are allowed");
  }
  // Sections lie inside the file, in order, without overflowing (each bound checked alone).
  if (m_off < kPlanHeaderBytes || m_off > size || m_len > size - m_off) {
    return InvalidArgumentError("truncated or corrupt: the manifest [" + std::to_string(m_off) +
                                ", +" + std::to_string(m_len) + ") is not inside the file's " +
                                std::to_string(size) + " bytes");
  }
  if (w_off < m_off + m_len || w_off > size || w_len > size - w_off ||
      w_off % kPlanWeightsAlignment != 0) {
    return InvalidArgumentError("truncated or corrupt: the weights [" + std::to_string(w_off) +
                                ", +" + std::to_string(w_len) + ") are not a page-aligned " +
                                "range inside the file's " + std::to_string(size) + " bytes");
  }
  if (XXH3_64bits(&bytes[m_off], m_len) != GetU64(&bytes[kAtManifestHash])) {
    return DataLossError("corrupt: the manifest's checksum does not match");
  }
  if (XXH3_64bits(bytes.data() + w_off, w_len) != GetU64(&bytes[kAtWeightsHash])) {
    return DataLossError("corrupt: the pre-packed weights' checksum does not match");
  }
  auto plan =
      ParsePlanManifest(std::string_view(reinterpret_cast<const char*>(&bytes[m_off]), m_len));
  if (!plan.ok()) return Status(plan.status().code(), "manifest: " + plan.status().message());
  if (plan->weights_bytes != w_len) {
    return InvalidArgumentError("manifest: weights.bytes = " + std::to_string(plan->weights_bytes) +
                                " but the file holds " + std::to_string(w_len));
  }
  return ParsedPlan{std::move(plan).value(), w_off};
}

Status WritePlanFile(const std::string& path, const BuildPlan& plan,
                     std::span<const uint8_t> weights) {
  const std::vector<uint8_t> bytes = SerializePlan(plan, weights);
  return WriteFileAtomically(path, bytes);
}

std::string PlanBesideModel(const std::string& model_path) {
  constexpr std::string_view kGguf = ".gguf";
  const bool gguf = model_path.size() > kGguf.size() &&
                    model_path.compare(model_path.size() - kGguf.size(), kGguf.size(), kGguf) == 0;
  return (gguf ? model_path.substr(0, model_path.size() - kGguf.size()) : model_path) + ".plan";
}

StatusOr<std::unique_ptr<PlanFile>> PlanFile::Open(const std::string& path) {
  const auto fail = [&](const std::string& why) { return InvalidArgumentError(path + ": " + why); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kFailedPrecondition,
                  path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  std::unique_ptr<PlanFile> file(new PlanFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* map = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return fail(std::string("cannot map: ") + std::strerror(err));
    }
    file->map_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);
  auto parsed = ParsePlanBytes({file->map_, file->size_});
  if (!parsed.ok()) return Status(parsed.status().code(), path + ": " + parsed.status().message());
  file->parsed_ = std::move(parsed).value();
  file->ReleasePages(file->map_, file->size_);  // the check read every page
  return file;
}

void PlanFile::ReleasePages(const uint8_t* begin, uint64_t bytes) const {
  if (map_ == nullptr || begin < map_ || bytes > size_ ||
      static_cast<uint64_t>(begin - map_) > size_ - bytes) {
    return;
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(begin);
  const uintptr_t first = (start + page - 1) / page * page;
  const uintptr_t last = (start + static_cast<uintptr_t>(bytes)) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

PlanFile::~PlanFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), size_);
}

std::span<const uint8_t> PlanFile::weights() const {
  return {map_ + parsed_.weights_offset, static_cast<size_t>(parsed_.plan.weights_bytes)};
}

Status CheckPlanMatches(const BuildPlan& plan, const std::string& path,
                        const PlanExpectations& here) {
  if (plan.model_fingerprint != here.model_fingerprint) {
    return FailedPreconditionError(path + ": the plan is for another model (fingerprint " +
                                   plan.model_fingerprint + ", \"" + plan.model_name +
                                   "\"); this model's is " + here.model_fingerprint +
                                   " (rebuild it: streamd build)");
  }
  if (plan.streamd_version != here.streamd_version) {
    return FailedPreconditionError(path + ": the plan was built by streamd " +
                                   plan.streamd_version + "; this is streamd " +
                                   here.streamd_version + " (rebuild it: streamd build)");
  }
  if (!(plan.hardware == here.hardware)) {
    return FailedPreconditionError(
        path + ": the plan was tuned on other hardware: plan: " + plan.hardware.Describe() +
        "; here: " + here.hardware.Describe() + " (rebuild it on this machine)");
  }
  return OkStatus();
}

}  // namespace streamd
