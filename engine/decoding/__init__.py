"""Speculative decoding: drafters propose, the target verifies a round in one batch, the
acceptance rule keeps the output lossless, the policy decides what drafting is worth, and Engine
(chat_engine.py) is the front door that streams answers with their statistics."""
