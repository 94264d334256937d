"""The learner image build tool: render, build and test learner images over a framework matrix.

The source folder is `build/` (DESIGN.md layout); the import name is `learnerkit_build` so that it never
shadows PyPA's `build` package.
"""
