# splitmix64 (Steele, Lea and Flood, 2014) for the compiled build: the collectors' root and edge ids
# and the shuffle grouper's reshuffles draw from it in C (no call, no int object). A .pxd only: the
# Python build draws from ``random`` instead (collector.py, grouping.py).

cdef inline unsigned long long splitmix64(unsigned long long* state) noexcept nogil:
    """The next number of the sequence whose state ``state`` points at (and advance it)."""
    state[0] += 0x9E3779B97F4A7C15ULL
    cdef unsigned long long z = state[0]
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL
    return z ^ (z >> 31)
