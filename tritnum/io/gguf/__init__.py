"""GGUF files (llama.cpp, bitnet.cpp): the modules behind ``tritnum.io``'s GGUF functions.

A public function reads from the outside in: :mod:`.file` (``read_gguf``, ``write_gguf``)
checks a hostile header against the file's size (:mod:`.header`), parses it
(:mod:`.container`, :mod:`.values`) and wraps the tensors (:mod:`.model`); writing plans
each tensor's type and bytes (:mod:`.encode`) from the block codecs (:mod:`.blocks`,
bitnet.cpp's I2_S layouts in :mod:`.i2s`, what a type's scales cannot hold in
:mod:`.scales`). :mod:`.quantize` streams a whole float model to a ternary type.
"""
