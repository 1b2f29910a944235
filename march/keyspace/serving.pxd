# Cython declarations for march/keyspace/serving.py (docs/compiled.md): the term and the serving
# state as C-level classes, so that ``Term.valid`` (called on every hand-out of an ID) is two C
# field reads, the clock and one comparison, without a Python frame. Types only; the code is
# march/keyspace/serving.py, which also runs as it is when not compiled.
cimport cython


cdef class ServingState


cdef class Term:
    cdef public object _now
    cdef public ServingState _state
    cdef public str ended
    cdef public object guard
    cdef public object number

    @cython.locals(state=ServingState, now=double)
    cpdef bint valid(self)


cdef class ServingState:
    cdef public object clock
    cdef public str name
    cdef public object phase
    cdef public object term
    cdef public Term _served
    cdef public double deadline
    cdef public object _terms
    cdef public object _timer
    cdef public list _listeners
    cdef public object _changed
    cdef public object promotions
    cdef public object demotions
    cdef public str last_change
