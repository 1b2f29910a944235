# Cython declarations for march/transport/flow.py (docs/compiled.md). Types only; the code is march/transport/flow.py.
from march.resp cimport RequestParser


cdef class Backpressure:
    cdef public object transport
    cdef public object limits
    cdef public object owner
    cdef public bint paused
    cdef public object stalled
    cdef public Py_ssize_t made
    cdef public Py_ssize_t room

    cpdef int add(self, list out, bytes reply) except? -1
    cpdef write(self, list out)
    cpdef bint over_limit(self) except -1
    cpdef pause(self)
    cpdef resume(self)
    cpdef go_on(self)
    cpdef pass_turn(self, requests, Py_ssize_t at, Py_ssize_t same_until)
    cpdef then(self, requests, Py_ssize_t at, Py_ssize_t same_until, bytes reply=*)


cdef class Intake:
    cdef public RequestParser parser
    cdef public InputBudget budget
    cdef public object owner
    cdef public Py_ssize_t held
    cdef public str error

    cpdef object feed(self, data)
    cpdef evict(self, Py_ssize_t held, Py_ssize_t budget)
    cpdef release(self)


cdef class InputBudget:
    cdef public object limits
    cdef public Py_ssize_t held
    cdef public set holders

    cpdef hold(self, conn, Py_ssize_t held)
