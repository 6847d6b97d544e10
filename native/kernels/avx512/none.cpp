// Built instead of avx512/vnni.cpp when the compiler cannot target AVX-512 VNNI.
#include "../blocks.h"
namespace mb { namespace kq { const KernelTable* vnni_table_unchecked() { return nullptr; } } }
