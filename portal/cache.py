"""Django's Redis cache backend, keeping one Redis client per connection pool.

Django's RedisCacheClient.get_client builds a new `redis.Redis` on every call,
and redis-py fills a table of some 200 response callbacks in each constructor:
about 0.4 ms of Python per cache call on a 2-core machine, on every API request
(the throttle counter) and every submission (the scheduling-pass debounce).
A `redis.Redis` is safe to share between threads (each command takes a
connection from the pool), so one per pool is enough.
"""

from __future__ import annotations

from django.core.cache.backends import redis as django_redis


class RedisCacheClient(django_redis.RedisCacheClient):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)
        return client


class RedisCache(django_redis.RedisCache):
    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = RedisCacheClient
