# The one declaration of the C-Blosc 1.x API that blzarr uses.
# Every function that may take time is declared nogil so callers can release the GIL.

cdef extern from "blosc.h" nogil:
    enum:
        BLOSC_MAX_OVERHEAD
        BLOSC_MAX_TYPESIZE
        BLOSC_MAX_BUFFERSIZE
        BLOSC_VERSION_FORMAT
        BLOSC_MAX_THREADS
        BLOSC_NEVER_SPLIT

    const char *BLOSC_VERSION_STRING
    const char *BLOSC_VERSION_DATE

    int blosc_compress_ctx(int clevel, int doshuffle, size_t typesize,
                           size_t nbytes, const void *src, void *dest,
                           size_t destsize, const char *compressor,
                           size_t blocksize, int numinternalthreads)
    int blosc_decompress_ctx(const void *src, void *dest, size_t destsize,
                             int numinternalthreads)
    int blosc_getitem(const void *src, int start, int nitems, void *dest)
    const char *blosc_list_compressors()
    const char *blosc_get_version_string()
    int blosc_get_complib_info(const char *compname, char **complib, char **version)
    int blosc_compname_to_compcode(const char *compname)
    void blosc_set_splitmode(int splitmode)
