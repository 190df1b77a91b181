"""The cluster: starting or joining Ray, the actors, noticing a lost cluster."""
