# Cython declarations for march/generators/bound.py (docs/compiled.md): a generator's fields as a
# C-level class, so that the fast path of a sequence (``SequenceGenerator.take``) reads them as C
# fields. Types only; the code is march/generators/bound.py, which also runs as it is when not
# compiled. Python code (``TimestampGenerator``, the tests' generators) still subclasses these.


cdef class Context:
    cdef readonly object store
    cdef readonly object lease
    cdef readonly object clock
    cdef readonly object policy
    cdef readonly object valid
    cdef readonly dict variants
    cdef readonly list landing


cdef class GeneratorState:
    cdef public object key
    cdef public object settings
    cdef public Context _ctx
    cdef public object _ceiling
    cdef public object _target
    cdef public object _write
    cdef public object _io
    cdef public object writes
    cdef public object waits
    cdef public object last_write_at
    cdef public object _latency
    cdef public object seen


cdef class DurableBound(GeneratorState):
    cpdef take(self, Py_ssize_t n)
