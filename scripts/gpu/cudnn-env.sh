# Sourced by the GPU scripts: makes cuDNN 9, cuBLAS and the CUDA 13 runtime loadable for the cuDNN decode
# baseline and the dense layer (kernels/library/cudnn_decode.cpp loads libcudnn.so.9 at run time, the cuDNN
# frontend libcudart.so.13, kernels/dense/dense.cu libcublas.so.13).
# The GPU machines have both only inside PyTorch's wheels (nvidia/cudnn/lib, nvidia/cu13/lib); a machine
# with a system cuDNN needs nothing. RETRO_CUDNN_LIB, when set, names cuDNN itself: the wheel's cuDNN folder is
# then left out (cuBLAS and the runtime are still found).
if command -v python3 > /dev/null; then
  _retro_libs=$(python3 - 2> /dev/null <<'PY'
import importlib, os
dirs = []
wheels = [("nvidia.cu13", "lib"), ("nvidia.cuda_runtime", "lib"), ("nvidia.cublas", "lib")]
if not os.environ.get("RETRO_CUDNN_LIB"):
    wheels.insert(0, ("nvidia.cudnn", "lib"))
for name, sub in wheels:
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        d = os.path.join(p, sub)
        if os.path.isdir(d):
            dirs.append(d)
print(":".join(dirs))
PY
)
  if [[ -n $_retro_libs ]]; then
    export LD_LIBRARY_PATH="$_retro_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  unset _retro_libs
fi
