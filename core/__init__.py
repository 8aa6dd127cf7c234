"""The log and what every other part needs from it: events, the store, blobs, subscriptions."""
