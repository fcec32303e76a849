"""The steps: the pipeline each command runs, declared once (pipeline.py), and the engine that runs its SQL files."""
