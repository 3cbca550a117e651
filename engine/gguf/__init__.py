"""The GGUF file format: headers read without llama.cpp, llama.cpp's limits checked before it
sees a file, and whether a draft's vocabulary pairs with a target's."""
