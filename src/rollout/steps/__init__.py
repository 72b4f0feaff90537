"""Step kinds: each decides from facts (Skip and why, or an Action), then applies the action.

Each host kind is one module of rollout.steps.kinds (KINDS); the other modules here are
helpers several kinds share."""
