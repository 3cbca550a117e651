"""Text in and out: conversations formatted for a model's chat template, user text tokenized as
plain text, stop strings and thinking blocks split from the streamed answer."""
