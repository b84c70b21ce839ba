"""pykka actors: session actors, the supervisor, and delivery projectors."""
