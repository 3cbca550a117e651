"""The user's earlier conversations as a private, persistent suffix index: drafts with no model."""
