// A test-only CPython module built against PyTorch's own headers and libtorch_python
// (tests/test_torch_oom_harness.py builds it with g++; nothing of aml links it). It
// calls an allocator entry point exactly as PyTorch's CUDAPluggableAllocator does and
// turns what it throws into Python exactly as PyTorch's bindings do:
//
//   * the address becomes a std::function<void*(size_t, int, cudaStream_t)> by
//     reinterpret_cast (torch._C._cuda_customAllocator), called from a C++ frame of
//     this library (CUDAPluggableAllocator::malloc), optionally with the GIL released;
//   * the call sits in HANDLE_TH_ERRORS / END_HANDLE_TH_ERRORS (torch/csrc/Exceptions.h,
//     the wrapper of torch.empty and every THPVariable function), whose catch turns a
//     c10::OutOfMemoryError into torch.OutOfMemoryError and any other std::exception
//     into RuntimeError.
//
// So a throw from aml's entry point crosses two shared objects (aml's _hooks, this one)
// and meets PyTorch's own catch code, as it does in real PyTorch between _hooks and
// libtorch_cuda / libtorch_python. cudaStream_t is declared as CUDA declares it (an
// opaque pointer): the CPU wheel has no CUDA headers.
#include <Python.h>

#include <c10/util/Exception.h>
#include <torch/csrc/Exceptions.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

typedef struct CUstream_st *cudaStream_t;

namespace {

using MallocFn = std::function<void *(size_t, int, cudaStream_t)>;
using FreeFn = std::function<void(void *, size_t, int, cudaStream_t)>;

// What CUDAPluggableAllocator keeps per allocation (its allocation_metadata_): the
// pointers a free may name; a pointer malloc never returned is refused before free.
std::mutex metadata_mutex;
std::unordered_map<void *, size_t> metadata;

// CUDAPluggableAllocator::malloc: the call, then the metadata (skipped on a throw).
void *pluggable_malloc(const MallocFn &fn, size_t size, int device) {
  void *r = fn(size, device, nullptr);
  std::lock_guard<std::mutex> lock(metadata_mutex);
  metadata.emplace(r, size);
  return r;
}

// call_malloc(address, size, device, release_gil) -> int: torch.empty's path.
PyObject *call_malloc(PyObject *, PyObject *args) {
  HANDLE_TH_ERRORS
  unsigned long long address = 0;
  Py_ssize_t size = 0;
  int device = 0;
  int release_gil = 0;
  if (!PyArg_ParseTuple(args, "KnIp", &address, &size, &device, &release_gil)) {
    return nullptr;
  }
  MallocFn fn = reinterpret_cast<void *(*)(size_t, int, cudaStream_t)>(address);
  void *r = nullptr;
  if (release_gil) {
    // The autograd engine's threads and C++ callers allocate without the GIL.
    struct Release {
      PyThreadState *state = PyEval_SaveThread();
      ~Release() { PyEval_RestoreThread(state); }
    } release;
    r = pluggable_malloc(fn, static_cast<size_t>(size), device);
  } else {
    r = pluggable_malloc(fn, static_cast<size_t>(size), device);
  }
  return PyLong_FromVoidPtr(r);
  END_HANDLE_TH_ERRORS
}

// call_free(address, ptr, device): CUDAPluggableAllocator::raw_delete.
PyObject *call_free(PyObject *, PyObject *args) {
  HANDLE_TH_ERRORS
  unsigned long long address = 0;
  unsigned long long ptr = 0;
  int device = 0;
  if (!PyArg_ParseTuple(args, "KKI", &address, &ptr, &device)) {
    return nullptr;
  }
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(metadata_mutex);
    auto it = metadata.find(reinterpret_cast<void *>(ptr));
    TORCH_CHECK(it != metadata.end(), "Trying to free a pointer not allocated here");
    size = it->second;
    metadata.erase(it);
  }
  FreeFn fn = reinterpret_cast<void (*)(void *, size_t, int, cudaStream_t)>(address);
  fn(reinterpret_cast<void *>(ptr), size, device, nullptr);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// keep_until_exit(address, ptr, device): a block freed by a C++ static destructor, after
// the interpreter is torn down, as PyTorch frees the tensors still alive at exit.
struct FreedAtExit {
  std::vector<std::pair<FreeFn, std::pair<void *, int>>> blocks;
  ~FreedAtExit() {
    for (auto &b : blocks) {
      size_t size = 0;
      {
        std::lock_guard<std::mutex> lock(metadata_mutex);
        size = metadata[b.second.first];
      }
      b.first(b.second.first, size, b.second.second, nullptr);
    }
  }
} freed_at_exit;

PyObject *keep_until_exit(PyObject *, PyObject *args) {
  unsigned long long address = 0;
  unsigned long long ptr = 0;
  int device = 0;
  if (!PyArg_ParseTuple(args, "KKI", &address, &ptr, &device)) {
    return nullptr;
  }
  FreeFn fn = reinterpret_cast<void (*)(void *, size_t, int, cudaStream_t)>(address);
  freed_at_exit.blocks.push_back({fn, {reinterpret_cast<void *>(ptr), device}});
  Py_RETURN_NONE;
}

// throw_c10_oom(): PyTorch's own allocator's refusal, through the same catch (the
// control: it must come out as torch.OutOfMemoryError).
PyObject *throw_c10_oom(PyObject *, PyObject *) {
  HANDLE_TH_ERRORS
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. (the harness's own c10 error)");
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"call_malloc", call_malloc, METH_VARARGS, "PyTorch's malloc path"},
    {"call_free", call_free, METH_VARARGS, "PyTorch's free path"},
    {"keep_until_exit", keep_until_exit, METH_VARARGS, "freed after the interpreter"},
    {"throw_c10_oom", throw_c10_oom, METH_NOARGS, "PyTorch's own OOM"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "torch_catch", nullptr, -1, methods};

} // namespace

PyMODINIT_FUNC PyInit_torch_catch(void) { return PyModule_Create(&module); }
