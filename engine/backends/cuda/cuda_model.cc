#include "engine/backends/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "engine/model/rope.h"

namespace streamd::cuda {
namespace {

namespace kc = kernels::cuda;

constexpr size_t kMaxGraphs = 32;
constexpr size_t kCublasWorkspaceBytes = 32 << 20;

size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

int64_t Grow(int64_t need, int64_t have, int64_t minimum) {
  if (need <= have) return have;
  int64_t c = std::max(minimum, have);
  while (c < need) c *= 2;
  return c;
}

// KV pool storage in device memory (the bookkeeping stays in BlockPool on the host).
//
// Block copies (Engine::Capture and Restore, through BlockPool::ReadBlocks / WriteBlocks) come
// from whichever thread asks, usually not the scheduler's, while the scheduler's stream may be
// in the middle of a step or of a graph capture. So they run on a stream of their own, made
// non-blocking (no implicit ordering with the legacy stream, hence none with anything else),
// and synchronize only that stream: a copy neither waits for the step in flight nor becomes
// part of a graph being captured. The scheduler captures in cudaStreamCaptureModeThreadLocal,
// which checks only the capturing thread's own calls, and nothing here names the capturing
// stream or synchronizes the device (not even the zeroing at creation, which is why it is a
// cudaMemsetAsync on this stream rather than a cudaMemset followed by cudaDeviceSynchronize).
// The two streams never touch the same bytes: the engine copies only blocks of a session that
// sits out the steps. Copies among themselves are serialized by mu_ (one stream, one waiter).
//
// One block of every layer is n_layers runs of block_elems() elements at a pitch of
// layer_elems(): one cudaMemcpy2DAsync. But the runtime refuses a pitch above
// cudaDevAttrMaxPitch (2^31 - 1 bytes on current GPUs) with cudaErrorInvalidPitchValue, and a
// pool sized to the device has layers larger than that (a 100 GB SmolLM2 pool: 3.3 GB per
// layer); then the runs go as one 1D copy each, on the same stream, with one synchronization.
class DevicePoolStorage final : public PoolStorage {
 public:
  // Takes the allocation, zeroes it and makes the copy stream.
  static StatusOr<std::unique_ptr<PoolStorage>> Create(DeviceBuffer buffer, int device) {
    int max_pitch = 0;
    STREAMD_CUDA_CHECK(cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device));
    std::unique_ptr<DevicePoolStorage> s(
        new DevicePoolStorage(std::move(buffer), device, static_cast<size_t>(max_pitch)));
    STREAMD_CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking));
    STREAMD_CUDA_CHECK(cudaMemsetAsync(s->buffer_.get(), 0, s->buffer_.bytes(), s->stream_));
    STREAMD_CUDA_CHECK(cudaStreamSynchronize(s->stream_));
    return std::unique_ptr<PoolStorage>(std::move(s));
  }
  ~DevicePoolStorage() override {
    if (stream_ != nullptr) {
      (void)cudaSetDevice(device_);
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
    }
  }
  DevicePoolStorage(const DevicePoolStorage&) = delete;
  DevicePoolStorage& operator=(const DevicePoolStorage&) = delete;

  uint16_t* data() override { return buffer_.get<uint16_t>(); }
  bool host_accessible() const override { return false; }
  // Run r: pool elements [first + r * pitch, + run) <-> host elements [r * run, + run).
  Status CopyOut(int64_t first, int64_t pitch, int64_t run, int64_t rows, uint16_t* host) override {
    return Copy(host, static_cast<size_t>(run) * 2, buffer_.get<uint16_t>() + first,
                static_cast<size_t>(pitch) * 2, static_cast<size_t>(run) * 2,
                static_cast<size_t>(rows), cudaMemcpyDeviceToHost);
  }
  Status CopyIn(int64_t first, int64_t pitch, int64_t run, int64_t rows,
                const uint16_t* host) override {
    return Copy(buffer_.get<uint16_t>() + first, static_cast<size_t>(pitch) * 2, host,
                static_cast<size_t>(run) * 2, static_cast<size_t>(run) * 2,
                static_cast<size_t>(rows), cudaMemcpyHostToDevice);
  }
  // Copy-on-write of a shared block (a fork): device to device, never through the host.
  Status CopyWithin(int64_t src, int64_t dst, int64_t pitch, int64_t run, int64_t rows) override {
    uint16_t* base = buffer_.get<uint16_t>();
    return Copy(base + dst, static_cast<size_t>(pitch) * 2, base + src,
                static_cast<size_t>(pitch) * 2, static_cast<size_t>(run) * 2,
                static_cast<size_t>(rows), cudaMemcpyDeviceToDevice);
  }

 private:
  DevicePoolStorage(DeviceBuffer buffer, int device, size_t max_pitch)
      : buffer_(std::move(buffer)), device_(device), max_pitch_(max_pitch) {}

  // `rows` rows of `width` bytes, row r at dst + r * dpitch and src + r * spitch.
  Status Copy(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
              cudaMemcpyKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    STREAMD_CUDA_CHECK(cudaSetDevice(device_));
    cudaError_t enqueued = cudaSuccess;
    const char* call = "cudaMemcpy2DAsync";
    if (rows > 1 && std::max(dpitch, spitch) <= max_pitch_) {
      enqueued = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, kind, stream_);
    } else {
      call = "cudaMemcpyAsync (one per layer)";
      for (size_t r = 0; r < rows && enqueued == cudaSuccess; ++r) {
        enqueued =
            cudaMemcpyAsync(static_cast<char*>(dst) + r * dpitch,
                            static_cast<const char*>(src) + r * spitch, width, kind, stream_);
      }
    }
    // Wait even when an enqueue failed: copies already enqueued may still read or write the
    // caller's host buffer, which is free to go once this returns.
    const cudaError_t synced = cudaStreamSynchronize(stream_);
    if (enqueued != cudaSuccess) return CudaError(enqueued, call, __FILE__, __LINE__);
    if (synced != cudaSuccess) {
      return CudaError(synced, "cudaStreamSynchronize (KV block copy)", __FILE__, __LINE__);
    }
    return OkStatus();
  }

  DeviceBuffer buffer_;
  int device_;
  size_t max_pitch_;  // bytes; cudaDevAttrMaxPitch
  std::mutex mu_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

StatusOr<std::unique_ptr<CudaModel>> CudaModel::FromCpuModel(const LlamaModel& model,
                                                             const CudaModelOptions& options) {
  std::unique_ptr<CudaModel> m(new CudaModel());
  STREAMD_RETURN_IF_ERROR(m->Init(model.config(), options));
  STREAMD_ASSIGN_OR_RETURN(m->weights_, UploadWeights(m->config_, model.weights(), m->stream_));
  return m;
}

StatusOr<std::unique_ptr<CudaModel>> CudaModel::Random(const LlamaConfig& config, uint64_t seed,
                                                       const CudaModelOptions& options) {
  std::unique_ptr<CudaModel> m(new CudaModel());
  STREAMD_RETURN_IF_ERROR(m->Init(config, options));
  STREAMD_ASSIGN_OR_RETURN(m->weights_, RandomWeights(m->config_, seed, m->stream_));
  return m;
}

Status CudaModel::Init(const LlamaConfig& config, const CudaModelOptions& options) {
  config_ = config;
  options_ = options;
  // The device kernels run the plain Llama layer only; other families are refused before any
  // device work (backend auto picks the CPU for them: engine/backends/backend.cc).
  if (!UsesPlainLlamaLayer(config)) {
    return UnimplementedError(
        "the CUDA backend does not run architecture \"" + config.architecture + "\" (" +
        config.name +
        ") yet: its kernels lack q/k/v biases, q/k norms, NEOX RoPE and Gemma's "
        "norms, GELU and local layers; "
        "the CPU backend serves it (engine.backend: cpu)");
  }
  STREAMD_ASSIGN_OR_RETURN(device_, QueryCudaDevice(options.device));
  if (device_.cc_major < 8) {
    return FailedPreconditionError("CUDA " + device_.Describe() +
                                   ": streamd's kernels are built for sm_80 and newer");
  }
  const kernels::KvPoolLayout layout{1, config.n_layers, config.n_kv_heads, config.head_dim, 16};
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  if (const char* why =
          kc::AttentionCanImplement(layout, {config.n_heads, config.head_dim, scale})) {
    return UnimplementedError("the CUDA backend cannot run " + config.name + ": " + why);
  }
  if (config.dim > 8192 || config.head_dim % 8 != 0 || config.rope_dim != config.head_dim) {
    return UnimplementedError("the CUDA backend cannot run " + config.name +
                              ": needs dim <= 8192 and full rotary head_dim");
  }
  const uint64_t need = CudaWeightBytes(config);
  if (static_cast<int64_t>(need) > device_.free_bytes) {
    return ResourceExhaustedError(
        "model " + config.name + " needs " + FormatBytes(static_cast<int64_t>(need)) +
        " of device memory for its f16 weights; CUDA " + device_.Describe());
  }
  STREAMD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  STREAMD_CUBLAS_CHECK(cublasCreate(&cublas_));
  STREAMD_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // A fixed workspace: cuBLAS then never allocates, which graph capture requires.
  STREAMD_RETURN_IF_ERROR(cublas_workspace_.Allocate(kCublasWorkspaceBytes, "cuBLAS workspace"));
  STREAMD_CUBLAS_CHECK(
      cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.bytes()));
  const RopeTable rope(config);
  STREAMD_RETURN_IF_ERROR(inv_freq_.Allocate(rope.inv_freq().size() * sizeof(double), "RoPE"));
  STREAMD_CUDA_CHECK(cudaMemcpy(inv_freq_.get(), rope.inv_freq().data(), inv_freq_.bytes(),
                                cudaMemcpyHostToDevice));
  STREAMD_CUDA_CHECK(cudaDeviceSynchronize());
  return OkStatus();
}

CudaModel::~CudaModel() {
  (void)cudaSetDevice(options_.device);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  DropGraphs();
  if (step_host_ != nullptr) (void)cudaFreeHost(step_host_);
  if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

void CudaModel::DropGraphs() {
  for (auto& [key, exec] : graphs_) (void)cudaGraphExecDestroy(exec);
  graphs_.clear();
}

std::string CudaModel::device_description() const {
  return "cuda " + device_.Describe() + ", f16 weights " +
         FormatBytes(static_cast<int64_t>(weights_.bytes));
}

StatusOr<int64_t> CudaModel::PoolBudgetFromFraction(double fraction) const {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return InvalidArgumentError("KV pool fraction = " + std::to_string(fraction) +
                                " is outside (0, 1]");
  }
  STREAMD_CUDA_CHECK(cudaSetDevice(options_.device));
  size_t free_b = 0, total_b = 0;
  STREAMD_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(fraction * 0.95 * static_cast<double>(free_b));
}

StatusOr<std::unique_ptr<BlockPool>> CudaModel::CreatePool(const KvShape& shape, int32_t block_size,
                                                           int64_t budget_bytes) {
  if (shape.n_layers != config_.n_layers || shape.n_kv_heads != config_.n_kv_heads ||
      shape.head_dim != config_.head_dim) {
    return InvalidArgumentError("KV pool shape does not match the model " + config_.name);
  }
  if (shape.dtype != kernels::KvDtype::kF16) {
    return UnimplementedError("the CUDA backend keeps K/V in f16; an int8 KV cache is CPU only");
  }
  STREAMD_CUDA_CHECK(cudaSetDevice(options_.device));
  const PoolStorageFactory device_memory =
      [this](int64_t bytes) -> StatusOr<std::unique_ptr<PoolStorage>> {
    size_t free_b = 0, total_b = 0;
    STREAMD_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Keep 5% of what is free for the step workspaces and cuBLAS.
    const int64_t usable = static_cast<int64_t>(0.95 * static_cast<double>(free_b));
    if (bytes > usable) {
      return ResourceExhaustedError(
          "KV pool of " + FormatBytes(bytes) + " does not fit on CUDA device " +
          std::to_string(options_.device) + " (" + device_.name +
          "): " + FormatBytes(static_cast<int64_t>(free_b)) + " free of " +
          FormatBytes(static_cast<int64_t>(total_b)) + " after " +
          FormatBytes(static_cast<int64_t>(weights_.bytes)) + " of weights, at most " +
          FormatBytes(usable) + " usable; lower engine.kv_pool");
    }
    DeviceBuffer buffer;
    STREAMD_RETURN_IF_ERROR(buffer.Allocate(static_cast<size_t>(bytes), "KV pool"));
    return DevicePoolStorage::Create(std::move(buffer), options_.device);
  };
  return BlockPool::Create(shape, block_size, budget_bytes, device_memory);
}

Status CudaModel::ValidatePlan(const StepPlan& plan) const {
  if (plan.pool == nullptr || plan.n_tokens() == 0 || plan.seqs.empty()) {
    return InvalidArgumentError("execute: the step plan is empty");
  }
  const BlockPool* pool = plan.pool;
  if (plan.local_pool != nullptr) {
    return InvalidArgumentError(
        "execute: the CUDA backend reads every layer from one pool (no local layers' pool)");
  }
  if (pool->host_accessible() || pool->layout().n_layers != config_.n_layers ||
      pool->layout().n_kv_heads != config_.n_kv_heads ||
      pool->layout().head_dim != config_.head_dim) {
    return InvalidArgumentError("execute: the CUDA backend needs a pool made by its CreatePool");
  }
  return OkStatus();
}

Status CudaModel::Reserve(int32_t n_tokens, int32_t n_seqs, int64_t n_ids, int32_t n_splits) {
  if (n_tokens <= cap_tokens_ && n_seqs <= cap_seqs_ && n_ids <= cap_ids_ &&
      n_splits <= cap_splits_) {
    return OkStatus();
  }
  // Everything captured refers to the old buffers.
  STREAMD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  DropGraphs();
  cap_tokens_ = static_cast<int32_t>(Grow(n_tokens, cap_tokens_, 16));
  cap_seqs_ = static_cast<int32_t>(Grow(n_seqs, cap_seqs_, 16));
  cap_ids_ = Grow(n_ids, cap_ids_, 1024);
  cap_splits_ = std::max(cap_splits_, n_splits);
  const LlamaConfig& c = config_;
  const size_t T = static_cast<size_t>(cap_tokens_);
  const size_t qkv = static_cast<size_t>(c.q_dim() + 2 * c.kv_dim());
  STREAMD_RETURN_IF_ERROR(x_.Allocate(T * c.dim * 4, "activations"));
  STREAMD_RETURN_IF_ERROR(xb_.Allocate(T * c.dim * 2, "activations"));
  STREAMD_RETURN_IF_ERROR(qkv_.Allocate(T * qkv * 4, "activations"));
  STREAMD_RETURN_IF_ERROR(q_sink_.Allocate(T * c.q_dim() * 4, "activations"));
  STREAMD_RETURN_IF_ERROR(attn_.Allocate(T * c.q_dim() * 2, "activations"));
  STREAMD_RETURN_IF_ERROR(proj_.Allocate(T * c.dim * 4, "activations"));
  STREAMD_RETURN_IF_ERROR(gate_up_.Allocate(T * 2 * c.ffn_dim * 4, "activations"));
  STREAMD_RETURN_IF_ERROR(h_.Allocate(T * c.ffn_dim * 2, "activations"));
  STREAMD_RETURN_IF_ERROR(logits_.Allocate(T * c.vocab_size * 4, "logits"));
  STREAMD_RETURN_IF_ERROR(ids_.Allocate(T * 4, "sampled ids"));
  STREAMD_RETURN_IF_ERROR(attn_ws_.Allocate(
      kc::DecodeAttentionWorkspaceBytes(cap_tokens_, c.n_heads, c.head_dim, cap_splits_),
      "attention workspace"));

  StepLayout& L = step_layout_;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t off = at;
    at += Align256(bytes);
    return off;
  };
  L.tokens = take(T * 4);
  L.seq_of = take(T * 4);
  L.positions = take(T * 8);
  L.cache_positions = take(T * 8);
  L.out_rows = take(T * 4);
  L.tables = take(static_cast<size_t>(cap_seqs_) * sizeof(kernels::SinkWindowTable));
  L.tiles = take(T * sizeof(kc::PrefillTile));
  L.ids = take(static_cast<size_t>(cap_ids_) * 4);
  L.total = at;
  if (step_host_ != nullptr) STREAMD_CUDA_CHECK(cudaFreeHost(step_host_));
  step_host_ = nullptr;
  STREAMD_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&step_host_), L.total));
  STREAMD_RETURN_IF_ERROR(step_dev_.Allocate(L.total, "step data"));
  return OkStatus();
}

Status CudaModel::Gemm(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* x, int64_t n,
                       float* y) {
  // Row-major y[n, rows] = x[n, k] W[rows, k]^T, i.e. column-major y^T = W^T(op) x^T:
  // W is column-major [k, rows] (ld k), transposed; x is column-major [k, n] (ld k).
  const float alpha = 1.0f, beta = 0.0f;
  STREAMD_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                                    static_cast<int>(n), static_cast<int>(k), &alpha, w, CUDA_R_16F,
                                    static_cast<int>(k), x, CUDA_R_16F, static_cast<int>(k), &beta,
                                    y, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  return OkStatus();
}

Status CudaModel::Enqueue(int32_t n, int32_t n_out, bool decode, int32_t n_tiles, int32_t n_splits,
                          int32_t keys_per_split, BlockPool& pool) {
  const LlamaConfig& c = config_;
  const StepLayout& L = step_layout_;
  uint8_t* dev = step_dev_.get<uint8_t>();
  const auto* tokens = reinterpret_cast<const int32_t*>(dev + L.tokens);
  const auto* seq_of = reinterpret_cast<const int32_t*>(dev + L.seq_of);
  const auto* positions = reinterpret_cast<const int64_t*>(dev + L.positions);
  const auto* cache_positions = reinterpret_cast<const int64_t*>(dev + L.cache_positions);
  const auto* out_rows = reinterpret_cast<const int32_t*>(dev + L.out_rows);
  const auto* tables = reinterpret_cast<const kernels::SinkWindowTable*>(dev + L.tables);
  const auto* tiles = reinterpret_cast<const kc::PrefillTile*>(dev + L.tiles);
  const int32_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const int64_t ld = q_dim + 2 * kv_dim;
  float* x = x_.get<float>();
  uint16_t* xb = xb_.get<uint16_t>();
  float* qkv = qkv_.get<float>();
  float* q_sink = q_sink_.get<float>();
  uint16_t* attn = attn_.get<uint16_t>();
  float* proj = proj_.get<float>();
  float* gate_up = gate_up_.get<float>();
  uint16_t* h = h_.get<uint16_t>();
  const kc::AttentionBatch batch{tables, seq_of, positions, n};
  const kc::AttentionShape shape{c.n_heads, c.head_dim,
                                 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const kernels::KvPoolLayout layout = pool.layout();

  STREAMD_CUDA_CHECK(kc::EmbeddingLookup(weights_.embedding, tokens, n, dim, x, stream_));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const CudaLayerWeights& w = weights_.layers[l];
    uint16_t* kv = pool.layer_data(l);
    STREAMD_CUDA_CHECK(kc::AddRmsNorm(x, l == 0 ? nullptr : proj, w.attn_norm, c.rms_eps, n, dim,
                                      nullptr, xb, stream_));
    STREAMD_RETURN_IF_ERROR(Gemm(w.wqkv, ld, dim, xb, n, qkv));
    STREAMD_CUDA_CHECK(kc::RopeAndWriteKv(qkv, ld, n, c.n_heads, c.head_dim, positions,
                                          cache_positions, inv_freq_.get<double>(), q_sink,
                                          {layout, kv, tables, seq_of}, stream_));
    if (decode) {
      STREAMD_CUDA_CHECK(kc::DecodeAttention(layout, kv, batch, qkv, ld, q_sink, shape, n_splits,
                                             keys_per_split, attn_ws_.get(), attn, stream_));
    } else {
      STREAMD_CUDA_CHECK(kc::PrefillAttention(layout, kv, batch, tiles, n_tiles, qkv, ld, q_sink,
                                              shape, attn, stream_));
    }
    STREAMD_RETURN_IF_ERROR(Gemm(w.wo, dim, q_dim, attn, n, proj));
    STREAMD_CUDA_CHECK(
        kc::AddRmsNorm(x, proj, w.ffn_norm, c.rms_eps, n, dim, nullptr, xb, stream_));
    STREAMD_RETURN_IF_ERROR(Gemm(w.w_gate_up, 2LL * ffn, dim, xb, n, gate_up));
    STREAMD_CUDA_CHECK(kc::SwiGlu(gate_up, n, ffn, h, stream_));
    STREAMD_RETURN_IF_ERROR(Gemm(w.w_down, dim, ffn, h, n, proj));
  }
  STREAMD_CUDA_CHECK(
      kc::AddRmsNorm(x, proj, weights_.output_norm, c.rms_eps, n, dim, out_rows, xb, stream_));
  return Gemm(weights_.output, c.vocab_size, dim, xb, n_out, logits_.get<float>());
}

Status CudaModel::Fail(Status s) {
  const cudaError_t e = cudaPeekAtLastError();
  if (IsStickyCudaError(e) && broken_.ok()) {
    broken_ =
        InternalError("CUDA " + device_.Describe() +
                      " is unusable after an earlier error (restart the process): " + s.message());
  }
  return s;
}

Status CudaModel::Execute(const StepPlan& plan, float* logits) {
  return Run(plan, logits, nullptr);
}

Status CudaModel::ExecuteGreedy(const StepPlan& plan, int32_t* next_tokens) {
  return Run(plan, nullptr, next_tokens);
}

Status CudaModel::CopyGreedyStepLogits(int64_t row, float* out) {
  if (!broken_.ok()) return broken_;
  if (row < 0 || row >= greedy_rows_) {
    return InvalidArgumentError("logits row " + std::to_string(row) +
                                " is not in the last greedy step (" + std::to_string(greedy_rows_) +
                                " rows)");
  }
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  STREAMD_CUDA_CHECK(cudaSetDevice(options_.device));
  STREAMD_CUDA_CHECK(cudaMemcpyAsync(out, logits_.get<float>() + static_cast<size_t>(row) * vocab,
                                     vocab * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STREAMD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return OkStatus();
}

Status CudaModel::Run(const StepPlan& plan, float* logits, int32_t* next_tokens) {
  if (!broken_.ok()) return broken_;
  greedy_rows_ = 0;  // whatever happens below, the last step's logits are gone
  STREAMD_RETURN_IF_ERROR(ValidatePlan(plan));
  STREAMD_CUDA_CHECK(cudaSetDevice(options_.device));
  const int32_t n = plan.n_tokens();
  const int32_t n_seqs = static_cast<int32_t>(plan.seqs.size());
  const bool decode = plan.decode;
  const int32_t max_keys = std::max(1, plan.max_keys);
  const int64_t n_ids = static_cast<int64_t>(plan.block_ids.size());
  // Splits depend on the sessions' bounds (S + W), not on how full they are, so a decode
  // batch keeps the same graph as its sessions grow.
  int32_t keys_per_split = max_keys, n_splits = 1;
  if (decode) {
    n_splits =
        kc::ChooseDecodeSplits(n, config_.n_kv_heads, max_keys, device_.sm_count, &keys_per_split);
  }
  if (Status s = Reserve(n, n_seqs, n_ids, n_splits); !s.ok()) return Fail(s);

  // The plan, copied into the pinned staging block at the layout's fixed offsets. The tables
  // point into the device copy of the plan's block ids; prefill tiles (a work split of this
  // backend's attention kernel, not a plan) are cut here.
  const StepLayout& L = step_layout_;
  auto* tables = reinterpret_cast<kernels::SinkWindowTable*>(step_host_ + L.tables);
  auto* tiles = reinterpret_cast<kc::PrefillTile*>(step_host_ + L.tiles);
  const int32_t* dev_ids = reinterpret_cast<const int32_t*>(step_dev_.get<uint8_t>() + L.ids);
  std::copy(plan.tokens.begin(), plan.tokens.end(),
            reinterpret_cast<int32_t*>(step_host_ + L.tokens));
  std::copy(plan.seq_of.begin(), plan.seq_of.end(),
            reinterpret_cast<int32_t*>(step_host_ + L.seq_of));
  std::copy(plan.position.begin(), plan.position.end(),
            reinterpret_cast<int64_t*>(step_host_ + L.positions));
  std::copy(plan.cache_position.begin(), plan.cache_position.end(),
            reinterpret_cast<int64_t*>(step_host_ + L.cache_positions));
  std::copy(plan.out_row.begin(), plan.out_row.end(),
            reinterpret_cast<int32_t*>(step_host_ + L.out_rows));
  std::copy(plan.block_ids.begin(), plan.block_ids.end(),
            reinterpret_cast<int32_t*>(step_host_ + L.ids));
  const int32_t tile_queries = kc::PrefillTileQueries(config_.n_heads / config_.n_kv_heads);
  int32_t n_tiles = 0;
  for (int32_t s = 0; s < n_seqs; ++s) {
    const PlannedSequence& ps = plan.seqs[s];
    tables[s] = ps.Table(dev_ids);
    if (decode) continue;
    for (int32_t i = 0; i < ps.n_tokens; i += tile_queries) {
      tiles[n_tiles++] = {ps.first_token + i, std::min(tile_queries, ps.n_tokens - i)};
    }
  }
  const int32_t n_out = plan.n_out;

  auto run = [&]() -> Status {
    STREAMD_CUDA_CHECK(
        cudaMemcpyAsync(step_dev_.get(), step_host_, L.total, cudaMemcpyHostToDevice, stream_));
    BlockPool& pool = *plan.pool;
    if (decode && options_.use_graphs) {
      // Everything the graph bakes in: the pool (base, blocks, block size), the shapes (n
      // tokens, n_out logits rows) and the attention split. The block ids, tables (with
      // first_window_block), positions and tokens are data in step_dev_, refreshed by the copy
      // above, so they may change every step. A plan from PlanStep has n_out == n in a decode
      // step, but n_out sizes the output GEMM, so it is part of the key rather than assumed.
      const GraphKey key{pool.layer_data(0),
                         pool.layout().num_blocks,
                         pool.layout().block_size,
                         n,
                         n_out,
                         n_splits,
                         keys_per_split};
      auto it = graphs_.find(key);
      if (it == graphs_.end()) {
        STREAMD_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        const Status enqueued = Enqueue(n, n_out, true, 0, n_splits, keys_per_split, pool);
        cudaGraph_t graph = nullptr;
        const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
        if (!enqueued.ok() || ended != cudaSuccess) {
          if (graph != nullptr) (void)cudaGraphDestroy(graph);
          STREAMD_RETURN_IF_ERROR(enqueued);
          STREAMD_CUDA_CHECK(ended);
        }
        cudaGraphExec_t exec = nullptr;
        const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
        (void)cudaGraphDestroy(graph);
        STREAMD_CUDA_CHECK(made);
        if (graphs_.size() >= kMaxGraphs) DropGraphs();
        it = graphs_.emplace(key, exec).first;
        ++graphs_captured_;
      }
      STREAMD_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    } else {
      STREAMD_RETURN_IF_ERROR(Enqueue(n, n_out, decode, n_tiles, n_splits, keys_per_split, pool));
    }
    if (next_tokens != nullptr) {
      STREAMD_CUDA_CHECK(kc::ArgmaxRows(logits_.get<float>(), n_out, config_.vocab_size,
                                        ids_.get<int32_t>(), stream_));
      STREAMD_CUDA_CHECK(cudaMemcpyAsync(next_tokens, ids_.get(), static_cast<size_t>(n_out) * 4,
                                         cudaMemcpyDeviceToHost, stream_));
    } else {
      STREAMD_CUDA_CHECK(cudaMemcpyAsync(logits, logits_.get(),
                                         static_cast<size_t>(n_out) * config_.vocab_size * 4,
                                         cudaMemcpyDeviceToHost, stream_));
    }
    STREAMD_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return OkStatus();
  };
  if (Status s = run(); !s.ok()) {
    (void)cudaStreamSynchronize(stream_);  // nothing of this step may still be running
    return Fail(s);
  }
  if (next_tokens != nullptr) greedy_rows_ = n_out;
  return OkStatus();
}

}  // namespace streamd::cuda
