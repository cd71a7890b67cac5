"""The authorization matrix, its environment of real identities, and the least-privilege audit."""
