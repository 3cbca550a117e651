"""llama.cpp itself: its backends (CPU, GPU) loaded safely, weights placed on the CPU and GPU, its
log routed to ours, and ModelRunner, the one class that calls llama.cpp to decode."""
