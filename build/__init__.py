"""The learner image build tool: render, build and test learner images over a framework matrix.

The source folder is `build/` (the project's layout, docs/architecture.md); the import name is
`learnerkit_build` so that it never shadows PyPA's `build` package.
"""
