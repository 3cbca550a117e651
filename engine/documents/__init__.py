"""The user's own documents: named collections of folders and files, indexed on this machine for search.

    readers   a file as text blocks that know where they are (page, first line), or why it cannot be read
    chunks    blocks into passages that follow the document's own structure (headings, paragraphs, code, pages)
    library   the SQLite database: collections, their sources, each file's state, passages and their
              full-text index (FTS5, BM25); a damaged database is set aside and rebuilt
    indexer   brings a collection's index up to date: only changed files, one transaction per file (so a
              crash or kill loses at most the file in hand and nothing is done twice), deleted files
              dropped, progress, pause and cancel
    embeddings an embedding model (GGUF) run through the engine's llama.cpp: passages and questions as
              unit vectors; which files are embedding models, and the prefixes some want
    vectors   passage vectors in the index, filled in by a resumable pass after indexing, searched
              exactly with numpy (why not sqlite-vec: its docstring)
    retrieval the passages that best answer a question, with where they are: BM25, fused with vector
              search when an embedding model is given

Contract (import-linter): besides the shared vocabulary (config, errors, paths), the GGUF header reader and
numpy, only the standard library and pypdf; never Qt, never the decoding loop; llama.cpp only through
engine.llama.embedding, and only from embeddings. Nothing here touches the network, and nothing ever
writes to the user's files: they are only opened for reading.
"""
