// RETRO_GPU_ONLY stand-in: the GPU machines have no Debian libraries, so nothing the GPU-only build
// compiles may include <cblas.h> (cmake/gpu_only.cmake puts this folder first on the include path).
#error "<cblas.h> is not available in the RETRO_GPU_ONLY build (the GPU machines lack it): keep it out of the kernels, their references and kernels/run"
