# Sourced on a GPU machine (tests/gpu/run_on_device.sh): unpacks the Debian packages of
# tests/gpu/fetch_tools.sh into /opt/devroot (not into /, whose libraries they could
# replace) and points PATH, the loader and the compiler at them. Only the Lua and OpenBLAS
# libraries go on LD_LIBRARY_PATH; libgfortran and readline only where the machine has
# none, so that Python's own libraries are untouched.
D=/opt/devroot
if [ ! -x $D/usr/bin/lua5.4 ]; then
    mkdir -p $D
    for f in .devtools/debs/*.deb; do dpkg -x "$f" $D; done
fi
L=$D/usr/lib/x86_64-linux-gnu
mkdir -p $D/lib
ln -sf $L/liblua5.4.so.0 $D/lib/
if ! ldconfig -p | grep -q 'libgfortran.so.5 '; then ln -sf $L/libgfortran.so.5 $L/libquadmath.so.0 $D/lib/; fi
# lua5.4 links readline (in the image as a rule; the package's where it is not)
if ! ldconfig -p | grep -q 'libreadline.so.8 '; then ln -sf $D/lib/x86_64-linux-gnu/libreadline.so.8 $D/lib/; fi
export PATH=$D/usr/bin:$PATH
export LD_LIBRARY_PATH=$L/openblas-pthread:$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LIBRARY_PATH=$L/openblas-pthread
export C_INCLUDE_PATH=$D/usr/include/x86_64-linux-gnu/openblas-pthread
# cuDNN's headers for the build (runtime/cuda/kernels/cudnn_*.c include <cudnn.h>): the
# toolkit's or the system's, else those inside PyTorch's wheel, if any.
if [ ! -e /usr/local/cuda/include/cudnn.h ] && [ ! -e /usr/include/cudnn.h ]; then
    inc=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], "include"))' 2>/dev/null)
    if [ -n "$inc" ] && [ -e "$inc/cudnn.h" ]; then
        export C_INCLUDE_PATH=$C_INCLUDE_PATH:$inc
        export CPLUS_INCLUDE_PATH=${CPLUS_INCLUDE_PATH:+$CPLUS_INCLUDE_PATH:}$inc
    fi
fi
# cuDNN for the attention sites (runtime/include/rt_cudnn.h loads it at run time): the
# toolkit's when it has one, else the one inside PyTorch's wheel, if any.
if [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ] && [ -z "${RT_CUDNN_SO:-}" ]; then
    so=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], "lib", "libcudnn.so.9"))' 2>/dev/null)
    [ -n "$so" ] && [ -e "$so" ] && export RT_CUDNN_SO=$so
fi
