# chat.message: modes, routing, audience domains, idempotency (CCCS §5, §6.1).
> {"v":1,"op":"group_create","args":{"title":"m"}}
< {"ok":true,"result":{"group_id":"$G"}}
> {"v":1,"op":"actor_add","args":{"group_id":"$G","actor_id":"lead","runtime":"none"}}
< {"ok":true}
> {"v":1,"op":"actor_add","args":{"group_id":"$G","actor_id":"p1","runtime":"none"}}
< {"ok":true}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"send"}}
< {"ok":true,"result":{"message_mode":"send","event":{"kind":"chat.message","seq":4,"by":"user","data":{"text":"hi","format":"plain","message_mode":"send","to":["@foreman"]}}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"send","to":["user","p1"]}}
< {"ok":false,"error":{"code":"invalid_request","details":{"reason":"mixed_audience"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"mail","to":["@user"],"by":"p1"}}
< {"ok":false,"error":{"code":"invalid_request","details":{"reason":"mail_to_user"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"request_reply","to":["@peers"]}}
< {"ok":false,"error":{"code":"invalid_request","details":{"reason":"request_reply_needs_concrete_recipients"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"send","to":["nobody"]}}
< {"ok":false,"error":{"code":"actor_not_found","details":{"actor_id":"nobody"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"hi","message_mode":"send","to":["@everyone"]}}
< {"ok":false,"error":{"code":"invalid_request","details":{"token":"@everyone"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"idem","message_mode":"mail","to":["p1"],"client_id":"c-1","zz":"ignored arg"}}
< {"ok":true,"result":{"event":{"id":"$E1","seq":5,"data":{"client_id":"c-1","to":["p1"]}}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"idem again","message_mode":"mail","to":["p1"],"client_id":"c-1"}}
< {"ok":true,"result":{"duplicate":true,"event":{"id":"$E1","seq":5}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"x","message_mode":"send","to":["p1"],"thread":"t-9","insight":"  I disagree  "}}
< {"ok":true,"result":{"event":{"seq":6,"data":{"thread":"t-9","insight":"I disagree"}}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"x","message_mode":"send","to":["p1"],"format":"html"}}
< {"ok":false,"error":{"code":"invalid_request","details":{"field":"format"}}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"x","message_mode":"send","to":["p1"],"src_event_id":"e"}}
< {"ok":false,"error":{"code":"invalid_request","details":{"field":"src_event_id"}}}
> {"v":1,"op":"send","args":{"group_id":"g_missing","text":"x","message_mode":"send"}}
< {"ok":false,"error":{"code":"group_not_found","details":{"group_id":"g_missing"}}}
> {"v":1,"op":"ledger_tail","args":{"group_id":"$G","limit":1}}
< {"ok":true,"result":{"head_seq":6,"count":1}}
