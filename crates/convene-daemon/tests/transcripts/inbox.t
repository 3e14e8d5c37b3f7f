# Mail inbox, mail.read, reply obligations and cancellation (CCCS §6.2, §6.3).
> {"v":1,"op":"group_create","args":{"title":"i"}}
< {"ok":true,"result":{"group_id":"$G"}}
> {"v":1,"op":"actor_add","args":{"group_id":"$G","actor_id":"lead","runtime":"none"}}
< {"ok":true}
> {"v":1,"op":"actor_add","args":{"group_id":"$G","actor_id":"p1","runtime":"none"}}
< {"ok":true}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"m1","message_mode":"mail","to":["@all"]}}
< {"ok":true,"result":{"event":{"id":"$M1"}}}
> {"v":1,"op":"inbox_peek","args":{"group_id":"$G","actor_id":"p1"}}
< {"ok":true,"result":{"cursor":{"event_id":null,"seq":0},"messages":[{"id":"$M1"}]}}
> {"v":1,"op":"inbox_read","args":{"group_id":"$G","actor_id":"p1","by":"lead"}}
< {"ok":false,"error":{"code":"permission_denied"}}
> {"v":1,"op":"inbox_read","args":{"group_id":"$G","actor_id":"p1","by":"p1"}}
< {"ok":true,"result":{"event":{"kind":"mail.read","by":"p1","data":{"actor_id":"p1","event_id":"$M1"}},"cursor":{"event_id":"$M1"},"messages":[{"id":"$M1"}]}}
> {"v":1,"op":"inbox_peek","args":{"group_id":"$G","actor_id":"p1"}}
< {"ok":true,"result":{"cursor":{"event_id":"$M1"},"messages":[]}}
> {"v":1,"op":"inbox_peek","args":{"group_id":"$G","actor_id":"lead"}}
< {"ok":true,"result":{"messages":[{"id":"$M1"}]}}
> {"v":1,"op":"send","args":{"group_id":"$G","text":"please review","message_mode":"request_reply","to":["lead","p1"]}}
< {"ok":true,"result":{"event":{"id":"$Q"}}}
> {"v":1,"op":"reply","args":{"group_id":"$G","reply_to":"$Q","text":"done","by":"p1"}}
< {"ok":true,"result":{"event":{"id":"$R","data":{"reply_to":"$Q","to":["user"],"quote_text":"please review"}}}}
> {"v":1,"op":"ledger_statuses","args":{"group_id":"$G","event_ids":["$Q"]}}
< {"ok":true,"result":{"statuses":{"$Q":{"obligation_status":{"p1":{"status":"replied","closed_by":"$R"},"lead":{"status":"requested"}}}}}}
> {"v":1,"op":"reply_request_cancel","args":{"group_id":"$G","source_event_id":"$Q","by":"p1"}}
< {"ok":false,"error":{"code":"permission_denied"}}
> {"v":1,"op":"reply_request_cancel","args":{"group_id":"$G","source_event_id":"$Q"}}
< {"ok":true,"result":{"event":{"kind":"chat.reply_request.cancelled","data":{"source_event_id":"$Q"}},"obligations":{"lead":"cancelled","p1":"replied"}}}
