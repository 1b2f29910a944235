# Cython declarations for march/generators/sequence.py (docs/compiled.md): the sequence generator as
# a C-level class, its fast path (``take``, ``take_run``) C functions reading C fields. Types only;
# the code is march/generators/sequence.py, which also runs as it is when not compiled.
from march.generators.bound cimport DurableBound


cdef class SequenceGenerator(DurableBound):
    cdef public object _base
    cdef public object _batch
    cdef public object _low
    cdef public object _next

    cpdef take(self, n)
    cpdef take_run(self, n)
