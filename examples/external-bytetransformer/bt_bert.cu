// bt_bert: runs the encoder layers of a BERT model with ByteTransformer's fp16 BertTransformer
// (github.com/bytedance/ByteTransformer, linked from its sources unchanged) on inputs prepared by
// seedbench_external_bytetransformer.py, and times each call with CUDA events.
//
//   bt_bert --probe          checks for a usable CUDA device; prints `key value` lines
//   bt_bert RUN_DIR          runs the files of RUN_DIR (below)
//
// RUN_DIR, written by the Python front:
//   config.txt   `key value` lines: batch_size seq_len hidden_size num_heads intermediate_size
//                num_layers warmup min_repeats min_time_s max_repeats remove_padding
//                fused_attention
//   weights.bin  per layer, in layer order, raw little-endian arrays, row-major:
//                fp16 qkv_kernel [H,3H] (= [Wq^T | Wk^T | Wv^T]), qkv_bias [3H],
//                     attr_output_kernel [H,H], attr_output_bias [H],
//                     inter_kernel [H,I], inter_bias [I], output_kernel [I,H], output_bias [H]
//                fp32 attr_output_ln_gamma [H], attr_output_ln_beta [H],
//                     output_ln_gamma [H], output_ln_beta [H]
//   input.f16    the embeddings' output (the first layer's input), fp16 [B,S,H]
//   mask.i32     the attention mask, int32 [B,S] (1 = token, 0 = padding; right-padded)
// and reads back:
//   output.f32   the last layer's output, float32 [B,S,H] (zeros at padding with remove-padding)
//   samples.txt  seconds per timed call (CUDA events around all layers), one a line
//   wall.txt     the same calls timed on the host clock
//   info.txt     `key value` lines about the device and the paths ByteTransformer took
// Exit status: 0 done; 3 unavailable here (reason on stderr and in RUN_DIR/unavailable.txt or,
// with --probe, as `unavailable REASON`); 1 any other error (message on stderr).

#include "bytetransformer/include/bert_transformer.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef BT_BERT_COMMIT
#define BT_BERT_COMMIT "unknown"
#endif
#ifndef BT_BERT_ARCHS
#define BT_BERT_ARCHS "unknown"
#endif
#ifndef BT_BERT_CUDA_VERSION
#define BT_BERT_CUDA_VERSION "unknown"
#endif

namespace {

using bytetransformer::BertTransformer;
using bytetransformer::BertTransformerInferParam;
using bytetransformer::BertTransformerParam;
using bytetransformer::OperationType;
constexpr OperationType kOp = OperationType::HALF;

constexpr int kUnavailable = 3;

struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void cuda_ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

void cublas_ok(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cublas status " + std::to_string(int(s)));
}

__global__ void probe_kernel(int *out) {
  *out = 1;
}

// Is there a device this binary's kernels run on? Throws Unavailable with the reason if not.
cudaDeviceProp probe_device() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    throw Unavailable(std::string("no usable CUDA device: cudaGetDeviceCount: ") +
                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  if (count == 0)
    throw Unavailable("no CUDA device visible");
  cudaDeviceProp prop;
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int *flag = nullptr;
  cuda_ok(cudaMalloc(&flag, sizeof(int)), "cudaMalloc");
  probe_kernel<<<1, 1>>>(flag);
  e = cudaGetLastError();
  if (e == cudaSuccess)
    e = cudaDeviceSynchronize();
  cudaFree(flag);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion ||
      e == cudaErrorInvalidDeviceFunction)
    throw Unavailable(std::string("bt_bert was built for sm_") + BT_BERT_ARCHS + ", device 0 (" +
                      prop.name + ") is sm_" + std::to_string(prop.major * 10 + prop.minor) +
                      ": " + cudaGetErrorName(e) + "; rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
                      std::to_string(prop.major * 10 + prop.minor));
  cuda_ok(e, "probe kernel");
  return prop;
}

std::map<std::string, std::string> read_config(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  std::map<std::string, std::string> kv;
  std::string key, value;
  while (in >> key >> value)
    kv[key] = value;
  return kv;
}

std::vector<char> read_file(const std::string &path, size_t expected_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  size_t size = static_cast<size_t>(in.tellg());
  if (size != expected_bytes)
    throw std::runtime_error(path + " holds " + std::to_string(size) + " bytes, expected " +
                             std::to_string(expected_bytes));
  std::vector<char> data(size);
  in.seekg(0);
  in.read(data.data(), static_cast<std::streamsize>(size));
  return data;
}

// Device memory owned for the life of the run.
struct DeviceArena {
  std::vector<void *> blocks;
  template <typename T>
  T *upload(const char *host, size_t count) {
    void *p = nullptr;
    cuda_ok(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
    blocks.push_back(p);
    cuda_ok(cudaMemcpy(p, host, count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    return static_cast<T *>(p);
  }
  void *alloc(size_t bytes) {
    void *p = nullptr;
    cuda_ok(cudaMalloc(&p, bytes), "cudaMalloc");
    blocks.push_back(p);
    return p;
  }
  ~DeviceArena() {
    for (void *p : blocks)
      cudaFree(p);
  }
};

// Which attention kernel ByteTransformer's constructors pick for these sizes (a restatement of
// the rules in bert_transformer.h / cutlass_attention.h at the pinned commit, for the report
// only; patches/sm90-cutlass-attention.patch adds sm_90 to the cutlass rule).
std::string attention_path(int arch, int seq_len, int size_per_head, bool fused_requested) {
  bool fused = fused_requested && size_per_head == 64 && seq_len <= 352 && arch >= 70;
  if (fused && seq_len % 2 == 0) {
    if ((arch == 70 && seq_len > 256) || (arch == 80 && seq_len > 384) ||
        (arch == 86 && seq_len > 256) || (arch > 86 && seq_len > 128))
      fused = false;
  }
  const bool cutlass_arch =
      arch == 80 || (arch == 90 && std::strstr(BT_BERT_COMMIT, "sm90-cutlass-attention"));
  if (cutlass_arch && seq_len % 8 == 0 && seq_len > 384 && seq_len <= 1024)
    return "cutlass fused MHA (CutlassAttention)";
  if (!fused)
    return "unfused: cuBLAS batched GEMMs + ByteTransformer softmax";
  return seq_len <= 80 ? "fused WMMA attention (short, seq_len <= 80)"
                       : "fused WMMA attention (long, seq_len <= 352)";
}

int run(const std::string &dir) {
  auto cfg = read_config(dir + "/config.txt");
  auto geti = [&](const char *k) {
    auto it = cfg.find(k);
    if (it == cfg.end())
      throw std::runtime_error(std::string("config.txt lacks ") + k);
    return std::stoi(it->second);
  };
  const int B = geti("batch_size"), S = geti("seq_len"), H = geti("hidden_size");
  const int heads = geti("num_heads"), I = geti("intermediate_size"), L = geti("num_layers");
  const int warmup = geti("warmup"), min_repeats = geti("min_repeats");
  const int max_repeats = geti("max_repeats");
  const double min_time_s = std::stod(cfg.at("min_time_s"));
  const bool remove_padding = geti("remove_padding") != 0;
  const bool fused_attention = geti("fused_attention") != 0;
  if (H % heads != 0 || I % H != 0 || H % 8 != 0)
    throw std::runtime_error("unsupported sizes: need H % heads == 0, I % H == 0, H % 8 == 0");
  const int head_size = H / heads;

  cudaDeviceProp prop = probe_device();
  const int arch = prop.major * 10 + prop.minor;

  // Weights.
  const size_t n16 = size_t(3) * H * H + 3 * H + size_t(H) * H + H + size_t(H) * I + I +
                     size_t(I) * H + H;
  const size_t n32 = size_t(4) * H;
  const size_t layer_bytes = n16 * sizeof(__half) + n32 * sizeof(float);
  std::vector<char> weights = read_file(dir + "/weights.bin", layer_bytes * L);
  std::vector<char> input = read_file(dir + "/input.f16", size_t(B) * S * H * sizeof(__half));
  std::vector<char> mask_in = read_file(dir + "/mask.i32", size_t(B) * S * sizeof(int32_t));

  DeviceArena dev;
  std::vector<BertTransformerParam<kOp>> params(L);
  for (int l = 0; l < L; ++l) {
    const char *p = weights.data() + layer_bytes * l;
    auto take16 = [&](size_t count) {
      __half *d = dev.upload<__half>(p, count);
      p += count * sizeof(__half);
      return d;
    };
    auto take32 = [&](size_t count) {
      float *d = dev.upload<float>(p, count);
      p += count * sizeof(float);
      return d;
    };
    BertTransformerParam<kOp> &w = params[l];
    w.attr_kernel_QKV = take16(size_t(3) * H * H);
    w.attention_param.attr_bias_QKV = take16(size_t(3) * H);
    w.attr_output_kernel = take16(size_t(H) * H);
    w.attr_output_bias = take16(H);
    w.inter_kernel = take16(size_t(H) * I);
    w.inter_bias = take16(I);
    w.output_kernel = take16(size_t(I) * H);
    w.output_bias = take16(H);
    w.attr_output_layernorm_gamma = take32(H);
    w.attr_output_layernorm_beta = take32(H);
    w.output_layernorm_gamma = take32(H);
    w.output_layernorm_beta = take32(H);
    w.intermediate_size = I / H;  // ByteTransformer's intermediate_size is a multiple of H
  }

  // The mask as ByteTransformer takes it: fp16 [B,S,S], row i of sequence b = its key mask.
  const int32_t *mask2d = reinterpret_cast<const int32_t *>(mask_in.data());
  std::vector<__half> mask3d(size_t(B) * S * S);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < S; ++i)
      for (int j = 0; j < S; ++j)
        mask3d[(size_t(b) * S + i) * S + j] = __float2half(mask2d[size_t(b) * S + j] ? 1.f : 0.f);
  const __half *d_mask =
      dev.upload<__half>(reinterpret_cast<const char *>(mask3d.data()), mask3d.size());
  const __half *d_input = dev.upload<__half>(input.data(), size_t(B) * S * H);
  __half *d_out[2] = {static_cast<__half *>(dev.alloc(size_t(B) * S * H * sizeof(__half))),
                      static_cast<__half *>(dev.alloc(size_t(B) * S * H * sizeof(__half)))};

  // The layers: one BertTransformer per layer (each keeps its weights), one shared workspace.
  // The legacy default stream, as ByteTransformer's torch op runs under torch's default stream
  // (bert_infer records events on stream 0 itself).
  cudaStream_t stream = nullptr;
  cublasHandle_t handle;
  cublas_ok(cublasCreate(&handle), "cublasCreate");
  cublas_ok(cublasSetStream(handle, stream), "cublasSetStream");
  std::vector<std::unique_ptr<BertTransformer<kOp>>> layers;
  unsigned long long buf_bytes = 0;
  for (int l = 0; l < L; ++l) {
    layers.emplace_back(new BertTransformer<kOp>(B, heads, head_size, S, fused_attention,
                                                 remove_padding, /*use_fp32 LN params=*/true));
    layers.back()->initialize(params[l]);
    buf_bytes = std::max(buf_bytes, layers.back()->cal_bufsize());
  }
  void *buf = dev.alloc(buf_bytes);

  const __half *last = nullptr;
  auto forward = [&]() {
    const __half *x = d_input;
    for (int l = 0; l < L; ++l) {
      __half *y = d_out[l % 2];
      BertTransformerInferParam<__half> ip{x, d_mask, y, buf, B, S, handle, stream};
      layers[l]->infer(ip);
      x = y;
    }
    last = x;
  };

  for (int i = 0; i < warmup; ++i)
    forward();
  cuda_ok(cudaStreamSynchronize(stream), "warm-up");
  cuda_ok(cudaGetLastError(), "warm-up launch");

  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> samples, wall;
  using clock = std::chrono::steady_clock;
  const auto began = clock::now();
  while (int(samples.size()) < min_repeats ||
         (std::chrono::duration<double>(clock::now() - began).count() < min_time_s &&
          int(samples.size()) < max_repeats)) {
    const auto t0 = clock::now();
    cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord");
    forward();
    cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
    const auto t1 = clock::now();
    float ms = 0.f;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    samples.push_back(ms * 1e-3);
    wall.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  cuda_ok(cudaGetLastError(), "timed calls");

  // The output of the last call.
  std::vector<__half> out16(size_t(B) * S * H);
  cuda_ok(cudaMemcpy(out16.data(), last, out16.size() * sizeof(__half), cudaMemcpyDeviceToHost),
          "cudaMemcpy D2H");
  std::vector<float> out32(out16.size());
  for (size_t i = 0; i < out16.size(); ++i)
    out32[i] = __half2float(out16[i]);
  {
    std::ofstream f(dir + "/output.f32", std::ios::binary);
    f.write(reinterpret_cast<const char *>(out32.data()),
            static_cast<std::streamsize>(out32.size() * sizeof(float)));
    if (!f)
      throw std::runtime_error("cannot write output.f32");
  }
  auto write_list = [&](const std::string &name, const std::vector<double> &v) {
    std::ofstream f(dir + "/" + name);
    f.precision(9);
    for (double s : v)
      f << s << "\n";
  };
  write_list("samples.txt", samples);
  write_list("wall.txt", wall);
  {
    std::ofstream f(dir + "/info.txt");
    f << "device " << prop.name << "\n"
      << "arch sm_" << arch << "\n"
      << "built_for sm_" << BT_BERT_ARCHS << "\n"
      << "cuda_compiler " << BT_BERT_CUDA_VERSION << "\n"
      << "bytetransformer_commit " << BT_BERT_COMMIT << "\n"
      // BertTransformer turns padding removal off for batches of 1 or 2.
      << "remove_padding " << (remove_padding && B > 2 ? 1 : 0) << "\n"
      << "attention " << attention_path(arch, S, head_size, fused_attention) << "\n"
      << "workspace_bytes " << buf_bytes << "\n";
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cublasDestroy(handle);
  std::printf("bt_bert: %d layers, batch %d x %d, %zu timed calls\n", L, B, S, samples.size());
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: bt_bert --probe | bt_bert RUN_DIR\n");
    return 1;
  }
  const std::string arg = argv[1];
  try {
    if (arg == "--probe") {
      cudaDeviceProp prop = probe_device();
      std::printf("ok 1\ndevice %s\narch sm_%d\nbuilt_for sm_%s\nbytetransformer_commit %s\n",
                  prop.name, prop.major * 10 + prop.minor, BT_BERT_ARCHS, BT_BERT_COMMIT);
      return 0;
    }
    return run(arg);
  } catch (const Unavailable &e) {
    if (arg == "--probe") {
      std::printf("unavailable %s\n", e.what());
    } else {
      std::ofstream(arg + "/unavailable.txt") << e.what() << "\n";
    }
    std::fprintf(stderr, "bt_bert: unavailable: %s\n", e.what());
    return kUnavailable;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bt_bert: error: %s\n", e.what());
    return 1;
  }
}
