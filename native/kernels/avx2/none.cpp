// Built instead of avx2/*.cpp when the compiler cannot target AVX2 (non-x86 hosts).
#include "../blocks.h"
namespace mb { namespace kq { const KernelTable* avx2_table_unchecked() { return nullptr; } } }
