#include "support/guarded_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "util/error.h"

namespace zt {

namespace {

size_t page_rounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

GuardedDeviceMemory::~GuardedDeviceMemory() {
  for (const auto& [start, bytes] : regions_) munmap(reinterpret_cast<void*>(start), bytes);
}

void* GuardedDeviceMemory::allocate(size_t bytes, MemCategory) {
  refuse_while_recording("an allocation");
  const size_t mapped = page_rounded(bytes);
  // Anonymous mappings are zero-filled; the guard state follows the current scope.
  void* p = mmap(nullptr, mapped, depth_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZT_CHECK(p != MAP_FAILED, "guarded device memory: mmap of " + std::to_string(bytes) +
                                " bytes failed: " + std::strerror(errno));
  regions_[reinterpret_cast<uintptr_t>(p)] = mapped;
  return p;
}

void GuardedDeviceMemory::release(void* p, size_t bytes) {
  refuse_while_recording("a release");
  auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
  ZT_CHECK(it != regions_.end(), "guarded device memory: release of an unknown pointer");
  if (const InFlight* busy = in_flight_overlap(p, bytes)) {
    // Called from destructors: report and stop rather than throw.
    std::fprintf(stderr,
                 "guarded device: a buffer of %zu bytes was released while it is the %s of a "
                 "collective in flight (wait for it on the host or the device first)\n",
                 bytes, busy->what.c_str());
    std::abort();
  }
  munmap(p, it->second);
  regions_.erase(it);
}

bool GuardedDeviceMemory::contains(const void* p, size_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = regions_.upper_bound(at);
  if (it == regions_.begin()) return false;
  --it;
  return at + bytes <= it->first + it->second;
}

void GuardedDeviceMemory::require_device(const void* p, size_t bytes, const char* what) const {
  if (p == nullptr) return;
  if (!contains(p, bytes))
    fail(std::string("guarded device: ") + what + " (" + std::to_string(bytes) +
         " bytes) is not device memory");
  if (const InFlight* busy = in_flight_overlap(p, bytes))
    fail(std::string("guarded device: ") + what + " (" + std::to_string(bytes) +
         " bytes) overlaps the " + busy->what +
         " of a collective in flight: wait for it on the host or the device first");
}

const GuardedDeviceMemory::InFlight* GuardedDeviceMemory::in_flight_overlap(const void* p,
                                                                            size_t bytes) const {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + bytes;
  for (const auto& [token, f] : in_flight_)
    if (bytes > 0 && begin < f.end && f.begin < end) return &f;
  return nullptr;
}

uint64_t GuardedDeviceMemory::begin_in_flight(const void* p, size_t bytes, std::string what) {
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uint64_t token = next_token_++;
  in_flight_[token] = InFlight{begin, begin + bytes, std::move(what)};
  return token;
}

void GuardedDeviceMemory::end_in_flight(uint64_t token) {
  in_flight_.erase(token);
}

void GuardedDeviceMemory::protect_all(int prot) {
  for (const auto& [start, bytes] : regions_) {
    if (mprotect(reinterpret_cast<void*>(start), bytes, prot) != 0) {
      std::fprintf(stderr, "guarded device memory: mprotect failed: %s\n", std::strerror(errno));
      std::abort();
    }
  }
}

void GuardedDeviceMemory::open() {
  if (depth_++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

void GuardedDeviceMemory::close() {
  if (--depth_ == 0) protect_all(PROT_NONE);
}

void GuardedDeviceMemory::issue(std::function<void()> op) {
  if (recording_) {
    if (refusing_) fail("guarded device: this test refuses the recording");
    recording_->push_back([this, op = std::move(op)] {
      Access access(*this);
      op();
    });
    return;
  }
  Access access(*this);
  op();
}

void GuardedDeviceMemory::refuse_while_recording(const char* what) const {
  if (recording_)
    fail(std::string("guarded device: ") + what + " while recording (a capture cannot hold it)");
}

void GuardedDeviceMemory::to_device(void* device, const void* host, size_t bytes) {
  refuse_while_recording("to_device (a host copy)");
  require_device(device, bytes, "to_device destination");
  Access access(*this);
  if (bytes) std::memcpy(device, host, bytes);
}

void GuardedDeviceMemory::to_host(void* host, const void* device, size_t bytes) {
  refuse_while_recording("to_host (a host copy)");
  require_device(device, bytes, "to_host source");
  Access access(*this);
  if (bytes) std::memcpy(host, device, bytes);
}

void GuardedDeviceMemory::copy(void* device_dst, const void* device_src, size_t bytes) {
  require_device(device_dst, bytes, "copy destination");
  require_device(device_src, bytes, "copy source");
  issue([=] {
    if (bytes) std::memmove(device_dst, device_src, bytes);
  });
}

void GuardedDeviceMemory::zero(void* device, size_t bytes) {
  require_device(device, bytes, "zero destination");
  issue([=] {
    if (bytes) std::memset(device, 0, bytes);
  });
}

void GuardedDeviceMemory::to_host_async(void* host, const void* device, size_t bytes) {
  refuse_while_recording("to_host_async (a host copy)");
  require_device(device, bytes, "to_host_async source");
  pending_copies_.push_back({host, device, bytes, copies_issued_++});
}

void GuardedDeviceMemory::to_device_async(void* device, const void* host, size_t bytes) {
  refuse_while_recording("to_device_async (a host copy)");
  require_device(device, bytes, "to_device_async destination");
  pending_copies_.push_back({device, host, bytes, copies_issued_++});
}

void GuardedDeviceMemory::wait_copies() {
  wait_copies_until(copies_issued_);
}

void GuardedDeviceMemory::wait_copies_until(uint64_t mark) {
  refuse_while_recording("a wait for copies");
  Access access(*this);
  while (!pending_copies_.empty() && pending_copies_.front().sequence < mark) {
    const PendingCopy& c = pending_copies_.front();
    if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
    pending_copies_.pop_front();
  }
}

namespace {

constexpr size_t kF = sizeof(float);

size_t bytes_of(int64_t n, size_t elem) {
  return static_cast<size_t>(n) * elem;
}

class GuardedBackend final : public Backend {
 public:
  GuardedBackend(Backend& inner, GuardedDeviceMemory& memory) : be_(inner), mem_(memory) {}

  std::string name() const override { return be_.name() + "+guarded"; }
  DeviceMemory& device_memory() override { return mem_; }
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work,
                                        std::string& why_not) override;
  uint64_t own_buffers_moved() const override { return mem_.own_buffer_moves(); }
  void synchronize() override { mem_.refuse_while_recording("synchronize (a host wait)"); }

  void matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M, int64_t N,
                      int64_t K) override {
    need(y, M * N, "matmul_forward y");
    need(x, M * K, "matmul_forward x");
    need(w, N * K, "matmul_forward w");
    issue([=, this] { be_.matmul_forward(y, x, w, M, N, K); });
  }
  void matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                          ConstTensorView residual, int64_t M, int64_t N, int64_t K) override {
    need(y, M * N, "matmul_forward_add y");
    need(x, M * K, "matmul_forward_add x");
    need(w, N * K, "matmul_forward_add w");
    need(residual, M * N, "matmul_forward_add residual");
    issue([=, this] { be_.matmul_forward_add(y, x, w, residual, M, N, K); });
  }
  void matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                       ConstTensorView w, int64_t M, int64_t N, int64_t K, bool accumulate_dx,
                       GradWrite dw_write) override {
    need(dx, M * K, "matmul_backward dx");
    need(dw, N * K, "matmul_backward dw");
    need(dy, M * N, "matmul_backward dy");
    need(x, M * K, "matmul_backward x");
    need(w, N * K, "matmul_backward w");
    issue([=, this] { be_.matmul_backward(dx, dw, dy, x, w, M, N, K, accumulate_dx, dw_write); });
  }
  void bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N) override {
    need(y, M * N, "bias_forward y");
    need(b, N, "bias_forward b");
    issue([=, this] { be_.bias_forward(y, b, M, N); });
  }
  void bias_backward(float* db, ConstTensorView dy, int64_t M, int64_t N) override {
    need(db, N, "bias_backward db");
    need(dy, M * N, "bias_backward dy");
    issue([=, this] { be_.bias_backward(db, dy, M, N); });
  }
  void rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g, int64_t M,
                       int64_t D, float eps, float weight_offset = 0.0f) override {
    need(y, M * D, "rmsnorm_forward y");
    need(rstd, M, "rmsnorm_forward rstd");
    need(x, M * D, "rmsnorm_forward x");
    need(g, D, "rmsnorm_forward g");
    issue([=, this] { be_.rmsnorm_forward(y, rstd, x, g, M, D, eps, weight_offset); });
  }
  void rmsnorm_backward(TensorView dx, float* dg, ConstTensorView dy, ConstTensorView x,
                        ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                        float weight_offset = 0.0f, GradWrite dg_write = GradWrite::kAdd) override {
    need(dx, M * D, "rmsnorm_backward dx");
    need(dg, D, "rmsnorm_backward dg");
    need(dy, M * D, "rmsnorm_backward dy");
    need(x, M * D, "rmsnorm_backward x");
    need(g, D, "rmsnorm_backward g");
    need(rstd, M, "rmsnorm_backward rstd");
    issue(
        [=, this] { be_.rmsnorm_backward(dx, dg, dy, x, g, rstd, M, D, weight_offset, dg_write); });
  }
  // Host memory: the wrapped backend reads it as the model passes it.
  void set_document_layout(const int32_t* host_doc_start, int64_t B, int64_t T) override {
    be_.set_document_layout(host_doc_start, B, T);
  }
  void rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd, const RopeSpec& rope,
                    const int32_t* doc_start = nullptr) override {
    need(x, B * T * H * hd, "rope_forward x");
    need_doc_start(doc_start, B * T, "rope_forward doc_start");
    issue([=, this] { be_.rope_forward(x, B, T, H, hd, rope, doc_start); });
  }
  void rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                     const RopeSpec& rope, const int32_t* doc_start = nullptr) override {
    need(dx, B * T * H * hd, "rope_backward dx");
    need_doc_start(doc_start, B * T, "rope_backward doc_start");
    issue([=, this] { be_.rope_backward(dx, B, T, H, hd, rope, doc_start); });
  }
  void attention_forward(TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                         int64_t hd, const int32_t* doc_start = nullptr,
                         const AttentionScores& scores = {}) override {
    need_doc_start(doc_start, B * T, "attention_forward doc_start");
    need(out, B * T * H * hd, "attention_forward out");
    need(lse, B * H * T, "attention_forward lse");
    need(q, B * T * H * hd, "attention_forward q");
    need(k, B * T * Hkv * hd, "attention_forward k");
    need(v, B * T * Hkv * hd, "attention_forward v");
    issue([=, this] {
      be_.attention_forward(out, lse, q, k, v, B, T, H, Hkv, hd, doc_start, scores);
    });
  }
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                          ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, const float* lse, int64_t B, int64_t T, int64_t H,
                          int64_t Hkv, int64_t hd, const int32_t* doc_start = nullptr,
                          const AttentionScores& scores = {}) override {
    const int64_t nq = B * T * H * hd, nkv = B * T * Hkv * hd;
    need_doc_start(doc_start, B * T, "attention_backward doc_start");
    need(dq, nq, "attention_backward dq");
    need(dk, nkv, "attention_backward dk");
    need(dv, nkv, "attention_backward dv");
    need(dout, nq, "attention_backward dout");
    need(q, nq, "attention_backward q");
    need(k, nkv, "attention_backward k");
    need(v, nkv, "attention_backward v");
    need(out, nq, "attention_backward out");
    need(lse, B * H * T, "attention_backward lse");
    issue([=, this] {
      be_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, B, T, H, Hkv, hd, doc_start,
                             scores);
    });
  }
  void glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                   GluActivation act = GluActivation::kSilu) override {
    need(h, n, "glu_forward h");
    need(gate, n, "glu_forward gate");
    need(up, n, "glu_forward up");
    issue([=, this] { be_.glu_forward(h, gate, up, n, act); });
  }
  void glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh, ConstTensorView gate,
                    ConstTensorView up, int64_t n,
                    GluActivation act = GluActivation::kSilu) override {
    need(dgate, n, "glu_backward dgate");
    need(dup, n, "glu_backward dup");
    need(dh, n, "glu_backward dh");
    need(gate, n, "glu_backward gate");
    need(up, n, "glu_backward up");
    issue([=, this] { be_.glu_backward(dgate, dup, dh, gate, up, n, act); });
  }
  void embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table, int64_t n,
                         int64_t D) override {
    need(x, n * D, "embedding_forward x");
    mem_.require_device(tokens, bytes_of(n, sizeof(int32_t)), "embedding_forward tokens");
    mem_.require_device(table.data, dtype_size(table.dtype), "embedding_forward table");
    issue([=, this] { be_.embedding_forward(x, tokens, table, n, D); });
  }
  void embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens, int64_t n,
                          int64_t D) override {
    mem_.require_device(dtable, kF, "embedding_backward dtable");
    need(dx, n * D, "embedding_backward dx");
    mem_.require_device(tokens, bytes_of(n, sizeof(int32_t)), "embedding_backward tokens");
    issue([=, this] { be_.embedding_backward(dtable, dx, tokens, n, D); });
  }
  void cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                     const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                     float softcap = 0.0f, const float* grad_scale_factor = nullptr) override {
    need(losses, M, "cross_entropy losses");
    need(dlogits, M * V, "cross_entropy dlogits");
    need(logits, M * V, "cross_entropy logits");
    need(grad_scale_factor, 1, "cross_entropy grad_scale_factor");
    mem_.require_device(targets, bytes_of(M, sizeof(int32_t)), "cross_entropy targets");
    issue([=, this] {
      be_.cross_entropy(losses, dlogits, logits, targets, M, V, grad_scale, softcap,
                        grad_scale_factor);
    });
  }
  void softcap_inplace(TensorView y, float c, int64_t n) override {
    need(y, n, "softcap_inplace y");
    issue([=, this] { be_.softcap_inplace(y, c, n); });
  }
  void adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
             float* param_f32, int64_t n, const AdamWHyper& h) override {
    need(master, n, "adamw master");
    need(m, n, "adamw m");
    need(v, n, "adamw v");
    need(grad, n, "adamw grad");
    mem_.require_device(param_bf16, bytes_of(n, sizeof(bf16_t)), "adamw param_bf16");
    need(param_f32, n, "adamw param_f32");
    issue([=, this] { be_.adamw(master, m, v, grad, param_bf16, param_f32, n, h); });
  }
  double sum_squares(const float* x, int64_t n) override {
    need(x, n, "sum_squares x");
    mem_.refuse_while_recording("sum_squares (a host read)");
    GuardedDeviceMemory::Access a(mem_);
    return be_.sum_squares(x, n);
  }
  void sum_squares_to(double* out, const float* x, int64_t n) override {
    need(x, n, "sum_squares_to x");
    mem_.require_device(out, sizeof(double), "sum_squares_to out");
    issue([=, this] { *out = be_.sum_squares(x, n); });
  }
  PhaseTimeline& timeline() override { return be_.timeline(); }
  void add_inplace(TensorView y, ConstTensorView x, int64_t n) override {
    need(y, n, "add_inplace y");
    need(x, n, "add_inplace x");
    issue([=, this] { be_.add_inplace(y, x, n); });
  }
  void scale_inplace(TensorView y, float s, int64_t n) override {
    need(y, n, "scale_inplace y");
    issue([=, this] { be_.scale_inplace(y, s, n); });
  }
  void dropout_forward(TensorView y, ConstTensorView x, int64_t M, int64_t K, float p,
                       uint64_t stream, int64_t first_row) override {
    need(y, M * K, "dropout_forward y");
    need(x, M * K, "dropout_forward x");
    issue([=, this] { be_.dropout_forward(y, x, M, K, p, stream, first_row); });
  }
  void dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b, ConstTensorView a,
                         float s, int64_t N, int64_t r, int64_t K, DType norm_type) override {
    need(norms, N, "dora_weight_norms norms");
    need(w, N * K, "dora_weight_norms w");
    need(b, N * r, "dora_weight_norms b");
    need(a, r * K, "dora_weight_norms a");
    issue([=, this] { be_.dora_weight_norms(norms, w, b, a, s, N, r, K, norm_type); });
  }
  void dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                          const float* norms, float offset, int64_t M, int64_t N,
                          bool accumulate) override {
    need(y, M * N, "dora_scale_columns y");
    need(x, M * N, "dora_scale_columns x");
    need(magnitude, N, "dora_scale_columns magnitude");
    need(norms, N, "dora_scale_columns norms");
    issue([=, this] { be_.dora_scale_columns(y, x, magnitude, norms, offset, M, N, accumulate); });
  }
  void dora_magnitude_grad(float* dm, ConstTensorView dy, ConstTensorView z, const float* norms,
                           int64_t M, int64_t N) override {
    need(dm, N, "dora_magnitude_grad dm");
    need(dy, M * N, "dora_magnitude_grad dy");
    need(z, M * N, "dora_magnitude_grad z");
    need(norms, N, "dora_magnitude_grad norms");
    issue([=, this] { be_.dora_magnitude_grad(dm, dy, z, norms, M, N); });
  }
  void zero(TensorView y, int64_t n) override { mem_.zero(y.data, view_bytes(y, n)); }
  void to_bf16(bf16_t* out, const float* in, int64_t n) override {
    mem_.require_device(out, bytes_of(n, sizeof(bf16_t)), "to_bf16 out");
    need(in, n, "to_bf16 in");
    issue([=, this] { be_.to_bf16(out, in, n); });
  }
  void from_bf16(float* out, const bf16_t* in, int64_t n) override {
    need(out, n, "from_bf16 out");
    mem_.require_device(in, bytes_of(n, sizeof(bf16_t)), "from_bf16 in");
    issue([=, this] { be_.from_bf16(out, in, n); });
  }
  void to_fp16(uint16_t* out, const float* in, int64_t n) override {
    mem_.require_device(out, bytes_of(n, sizeof(uint16_t)), "to_fp16 out");
    need(in, n, "to_fp16 in");
    issue([=, this] { be_.to_fp16(out, in, n); });
  }
  void from_fp16(float* out, const uint16_t* in, int64_t n) override {
    need(out, n, "from_fp16 out");
    mem_.require_device(in, bytes_of(n, sizeof(uint16_t)), "from_fp16 in");
    issue([=, this] { be_.from_fp16(out, in, n); });
  }

 private:
  void issue(std::function<void()> op) { mem_.issue(std::move(op)); }
  // n elements of the view's storage type (float32 for a plain float pointer).
  void need(ConstTensorView p, int64_t n, const char* what) const {
    mem_.require_device(p.data, view_bytes(p, n), what);
  }
  // Document masks are optional (null: none).
  void need_doc_start(const int32_t* doc_start, int64_t n, const char* what) const {
    if (doc_start) mem_.require_device(doc_start, bytes_of(n, sizeof(int32_t)), what);
  }

  Backend& be_;
  GuardedDeviceMemory& mem_;
};

// What GuardedBackend::capture recorded; each replay runs it again, in issue order.
class GuardedRecording final : public CapturedWork {
 public:
  explicit GuardedRecording(std::vector<std::function<void()>> ops) : ops_(std::move(ops)) {}
  void replay() override {
    for (const std::function<void()>& op : ops_) op();
  }

 private:
  std::vector<std::function<void()>> ops_;
};

std::unique_ptr<CapturedWork> GuardedBackend::capture(const std::function<void()>& work,
                                                      std::string& why_not) {
  ZT_CHECK(!mem_.recording(), "guarded device: a recording inside a recording");
  std::vector<std::function<void()>> ops;
  mem_.begin_recording(&ops);
  try {
    work();
  } catch (const std::exception& e) {
    mem_.end_recording();
    why_not = e.what();
    return nullptr;
  }
  mem_.end_recording();
  return std::make_unique<GuardedRecording>(std::move(ops));
}

// Bytes of the rank-tree partial sums a reduce-scatter's caller lent (0 when none).
size_t lent_scratch_bytes(const CollectiveCall& call) {
  return call.scratch == nullptr ? 0 : rank_tree_scratch_bytes(call);
}

class GuardedRequest final : public CommRequest {
 public:
  GuardedRequest(CollectiveCall call, GuardedDeviceMemory& memory, CommHandle inner)
      : CommRequest(std::move(call)), mem_(memory), inner_(std::move(inner)) {
    const CollectiveBytes bytes = collective_bytes(this->call());
    const std::string op = collective_op_name(this->call().op);
    const std::string seq = " #" + std::to_string(this->call().sequence);
    if (bytes.send > 0)
      tokens_.push_back(mem_.begin_in_flight(this->call().send, bytes.send, op + seq + " send"));
    if (bytes.recv > 0)
      tokens_.push_back(mem_.begin_in_flight(this->call().recv, bytes.recv, op + seq + " recv"));
    if (const size_t scratch = lent_scratch_bytes(this->call()); scratch > 0)
      tokens_.push_back(mem_.begin_in_flight(this->call().scratch, scratch, op + seq + " scratch"));
  }
  ~GuardedRequest() override {
    if (!inner_.done()) {
      GuardedDeviceMemory::Access a(mem_);
      inner_.wait();
    }
    completed();
  }
  bool poll() override {
    GuardedDeviceMemory::Access a(mem_);
    if (!inner_.test()) return false;
    completed();
    return true;
  }
  // The host thread is this model's device: work issued later runs after the collective.
  bool enqueue_device_wait() override {
    {
      GuardedDeviceMemory::Access a(mem_);
      inner_.wait();
    }
    completed();
    return true;
  }
  void abort_job(int exit_code) override {
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }

 private:
  void completed() {
    for (uint64_t t : tokens_) mem_.end_in_flight(t);
    tokens_.clear();
  }

  GuardedDeviceMemory& mem_;
  CommHandle inner_;
  std::vector<uint64_t> tokens_;
};

class GuardedCommunicator final : public Communicator {
 public:
  GuardedCommunicator(Communicator& inner, GuardedDeviceMemory& memory)
      : inner_(inner), mem_(memory) {}
  ~GuardedCommunicator() override { finish_device_waits(); }
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  const char* backend_name() const override { return inner_.backend_name(); }

 protected:
  std::unique_ptr<CommRequest> start_collective(CollectiveCall call) override {
    const CollectiveBytes bytes = collective_bytes(call);
    if (bytes.send > 0) mem_.require_device(call.send, bytes.send, "collective send buffer");
    if (bytes.recv > 0) mem_.require_device(call.recv, bytes.recv, "collective recv buffer");
    if (const size_t scratch = lent_scratch_bytes(call); scratch > 0)
      mem_.require_device(call.scratch, scratch, "rank-tree scratch");
    mem_.refuse_while_recording("a collective");
    GuardedDeviceMemory::Access a(mem_);
    CommHandle inner = forward_collective(inner_, call, call.send, call.recv, call.scratch);
    return std::make_unique<GuardedRequest>(std::move(call), mem_, std::move(inner));
  }

 private:
  Communicator& inner_;
  GuardedDeviceMemory& mem_;
};

}  // namespace

std::unique_ptr<Backend> make_guarded_backend(Backend& inner, GuardedDeviceMemory& memory) {
  return std::make_unique<GuardedBackend>(inner, memory);
}

std::unique_ptr<Communicator> make_guarded_communicator(Communicator& inner,
                                                        GuardedDeviceMemory& memory) {
  return std::make_unique<GuardedCommunicator>(inner, memory);
}

}  // namespace zt
