// The same layout checks, compiled as C++.
#include "abi_layout.c"
