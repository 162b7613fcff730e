# Cross-compiles weir for 64-bit Arm Linux (phones, single-board computers) with Debian's
# g++-aarch64-linux-gnu and the arm64 development packages; docs/architecture.md has the steps.
# ctest runs the test binaries (and the weir binary the integration tests call) under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# qemu finds the arm64 loader and libraries through their multiarch paths; passing a sysroot
# with -L made thread creation hang under qemu 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
