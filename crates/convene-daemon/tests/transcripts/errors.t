# Malformed and unknown input: structured errors, connection keeps serving (CCCS §11).
> {broken
< {"v":1,"ok":false,"result":{},"error":{"code":"invalid_request","details":{}}}
> {"v":1,"op":"ping","args":{},"extra":true}
< {"v":1,"ok":false,"error":{"code":"invalid_request"}}
> {"v":1,"op":"frobnicate","args":{}}
< {"v":1,"ok":false,"error":{"code":"unknown_op","message":"unknown operation: frobnicate","details":{"op":"frobnicate"}}}
> {"v":1,"op":"send","args":{}}
< {"v":1,"ok":false,"error":{"code":"invalid_request","details":{"field":"group_id"}}}
> {"v":1,"op":"send","args":{"group_id":7}}
< {"v":1,"ok":false,"error":{"code":"invalid_request","details":{"field":"group_id"}}}
> {"v":1,"op":"events_stream","args":{"group_id":"g_none"}}
< {"v":1,"ok":false,"error":{"code":"group_not_found"}}
