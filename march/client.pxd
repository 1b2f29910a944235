# Cython declarations for march/client.py (docs/compiled.md): ``Client`` as a C-level class, so that
# the per-read path (march/transport/connection.py) writes ``last_active`` and reads ``close_after``
# and ``user`` as C fields. Types only; the code is march/client.py, which also runs as it is when
# not compiled. Every attribute of ``Client.__slots__`` is here: a C-level class has no other.


cdef class Client:
    cdef public object addr
    cdef public object app
    cdef public object argv_mem
    cdef public object auth_failures
    cdef public object authenticated
    cdef public bint close_after
    cdef public object cmd
    cdef public double created
    cdef public object events
    cdef public object executing
    cdef public object fd
    cdef public object forwarding
    cdef public object generators
    cdef public object id
    cdef public object laddr
    cdef public double last_active
    cdef public object lib_name
    cdef public object lib_ver
    cdef public object link
    cdef public object multi
    cdef public object multi_error
    cdef public object multi_mem
    cdef public object name
    cdef public object proto
    cdef public object push
    cdef public object query_buffer
    cdef public object relay_link
    cdef public object tls
    cdef public object unsent
    cdef public object user
