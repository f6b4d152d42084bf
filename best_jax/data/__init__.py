"""Reading, validating and writing IR formats; dataset builders."""
