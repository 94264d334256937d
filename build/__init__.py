"""The learner image build tool: render, build and test learner images over a framework matrix.

The source folder is `build/` (the project's layout, docs/architecture.md); the import name is
`learnerkit_build` so that it never shadows PyPA's `build` package.

Its rooms follow an image's life, top to bottom, and import only rooms below them (the `build-rooms`
contract in `.importlinter`): the command modules `cli_image`, `cli_framework` and `cli_options`; `views` and
`progress`; `publish/`; `attestations/`; `scan/` (its own modules ordered by `scan-layers`); `builds/` beside
`imagetest/`; `lock/`; `recipes/` beside `repro/`; `state` and `errors` at the ground.
"""
