# CPython's hash of a 3-tuple (Objects/tupleobject.c: xxHash's 64-bit primes and rotation) for the
# compiled build, so a collector computes a child's lineage, ``hash((parent, salt, ordinal))``, without
# building the tuple. A .pxd only: the Python build calls ``hash`` itself, and collector.py checks at
# import that these agree with this interpreter's ``hash`` before it uses them.

cdef inline unsigned long long xx_round(unsigned long long acc, unsigned long long lane) noexcept nogil:
    acc += lane * 14029467366897019727ULL
    acc = (acc << 31) | (acc >> 33)
    return acc * 11400714785074694791ULL


cdef inline object hash3h(object a, Py_hash_t hb, Py_hash_t hc):
    """``hash((a, b, c))`` given the hashes of ``b`` and ``c`` (the arithmetic wraps at 64 bits)."""
    cdef unsigned long long acc = xx_round(2870177450012600261ULL, <unsigned long long>hash(a))
    acc = xx_round(acc, <unsigned long long>hb)
    acc = xx_round(acc, <unsigned long long>hc)
    acc += 3 ^ (2870177450012600261ULL ^ 3527539ULL)
    if acc == <unsigned long long>-1:
        return 1546275796
    return <long long>acc


cdef inline object hash3(object a, object b, object c):
    """``hash((a, b, c))``."""
    return hash3h(a, hash(b), hash(c))
