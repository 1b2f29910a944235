# Cython declarations for march/keyspace/serving.py (docs/compiled.md): the term as a C-level class,
# so that ``Term.valid`` (called on every hand-out of an ID) runs without a Python frame. Types only;
# the code is march/keyspace/serving.py, which also runs as it is when not compiled.


cdef class Term:
    cdef public object _now
    cdef public object _state
    cdef public str ended
    cdef public object guard
    cdef public object number
