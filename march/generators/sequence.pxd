# Cython declarations for march/generators/sequence.py (docs/compiled.md): the sequence generator as
# a C-level class, its fast path (``take``, ``take_run``) C functions on C integers. ``next`` and
# the fast path's copy of the ceiling (``_bound``) are unsigned 64-bit: both lie in [0, 2**63]
# (TOP), and ``next + n`` stays below 2**64 for every n a caller passes (at most max_incrby, or
# a run's length). Types only; the code is march/generators/sequence.py, which also runs as it is
# when not compiled.
cimport cython

from march.generators.bound cimport DurableBound


cdef class SequenceGenerator(DurableBound):
    cdef public object _base
    cdef public object _batch
    cdef public unsigned long long _bound
    cdef public unsigned long long _low
    cdef public unsigned long long _next

    @cython.locals(end=cython.ulonglong)
    cpdef take(self, Py_ssize_t n)
    @cython.locals(first=cython.ulonglong, end=cython.ulonglong)
    cpdef take_run(self, Py_ssize_t n)
