"""The planner (``specdec plan``): which speculative setting to deploy per category and load
band, predicted from one run's captured rounds and step timings (``predict.py`` states the model)."""
