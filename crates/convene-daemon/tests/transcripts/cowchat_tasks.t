# Tasks: assign, update, list (answered as `task_list`). The actor gets its answer, the other
# members a push.
#! ignore turn_changed
A> {"id":"a1","type":"register","payload":{"name":"alice","protocol_version":2,"agent_id":"alice"}}
A< {"type":"ok","reply_to":"a1"}
A> {"id":"a2","type":"create_room","payload":{"name":"work","public":true}}
A< {"type":"ok","reply_to":"a2","payload":{"room_id":"$room"}}
A> {"id":"a3","type":"join_room","payload":{"room_id":"$room"}}
A< {"type":"ok","reply_to":"a3"}
B> {"id":"b1","type":"register","payload":{"name":"bob","protocol_version":2,"agent_id":"bob"}}
B< {"type":"ok","reply_to":"b1"}
B> {"id":"b2","type":"join_room","payload":{"room_id":"$room"}}
B< {"type":"ok","reply_to":"b2"}
A< {"type":"agent_joined","payload":{"agent":{"agent_id":"bob"}}}
C> {"id":"c1","type":"register","payload":{"name":"carol","protocol_version":2,"agent_id":"carol"}}
C< {"type":"ok","reply_to":"c1"}
A> {"id":"a4","type":"assign_task","payload":{"room_id":"$room","title":"Build the parser","description":"recursive descent","assignee":"bob"}}
A< {"type":"ok","reply_to":"a4","payload":{"task_id":"$t1","room_id":"$room","title":"Build the parser","description":"recursive descent","assignee":"bob","status":"pending","created_by":"alice","created_at":"*"}}
B< {"type":"task_assigned","payload":{"task_id":"$t1","room_id":"$room","title":"Build the parser","assignee":"bob","status":"pending","created_by":"alice"}}
A> {"id":"a5","type":"assign_task","payload":{"room_id":"$room","title":"x","assignee":"carol"}}
A< {"type":"error","reply_to":"a5","payload":{"code":"not_in_room"}}
A> {"id":"a6","type":"assign_task","payload":{"room_id":"$room","title":" "}}
A< {"type":"error","reply_to":"a6","payload":{"code":"invalid_payload"}}
C> {"id":"c2","type":"assign_task","payload":{"room_id":"$room","title":"sneaky"}}
C< {"type":"error","reply_to":"c2","payload":{"code":"not_in_room"}}
B> {"id":"b3","type":"update_task","payload":{"task_id":"$t1","status":"in_progress","note":"on it"}}
B< {"type":"ok","reply_to":"b3","payload":{"task_id":"$t1","status":"in_progress","assignee":"bob","note":"on it","updated_by":"bob"}}
A< {"type":"task_updated","payload":{"task_id":"$t1","room_id":"$room","status":"in_progress","assignee":"bob","note":"on it","updated_by":"bob"}}
B> {"id":"b4","type":"update_task","payload":{"task_id":"$t1","status":"done"}}
B< {"type":"error","reply_to":"b4","payload":{"code":"invalid_payload"}}
B> {"id":"b5","type":"update_task","payload":{"task_id":"task-nope","status":"blocked"}}
B< {"type":"error","reply_to":"b5","payload":{"code":"task_not_found"}}
B> {"id":"b6","type":"update_task","payload":{"task_id":"$t1"}}
B< {"type":"error","reply_to":"b6","payload":{"code":"invalid_payload"}}
B> {"id":"b7","type":"update_task","payload":{"task_id":"$t1","assignee":"carol"}}
B< {"type":"error","reply_to":"b7","payload":{"code":"not_in_room"}}
C> {"id":"c3","type":"update_task","payload":{"task_id":"$t1","status":"completed"}}
C< {"type":"error","reply_to":"c3","payload":{"code":"not_in_room"}}
A> {"id":"a7","type":"assign_task","payload":{"room_id":"$room","title":"Write the docs"}}
A< {"type":"ok","reply_to":"a7","payload":{"task_id":"$t2","assignee":null,"status":"pending"}}
B< {"type":"task_assigned","payload":{"task_id":"$t2","assignee":null,"status":"pending"}}
B> {"id":"b8","type":"update_task","payload":{"task_id":"$t2","status":"completed","assignee":"bob"}}
B< {"type":"ok","reply_to":"b8","payload":{"task_id":"$t2","status":"completed","assignee":"bob"}}
A< {"type":"task_updated","payload":{"task_id":"$t2","status":"completed","assignee":"bob"}}
A> {"id":"a8","type":"list_tasks","payload":{"room_id":"$room"}}
A< {"type":"task_list","reply_to":"a8","payload":{"room_id":"$room","tasks":[{"task_id":"$t1","status":"in_progress"},{"task_id":"$t2","status":"completed"}]}}
A> {"id":"a9","type":"list_tasks","payload":{"room_id":"$room","status":"in_progress"}}
A< {"type":"task_list","reply_to":"a9","payload":{"tasks":[{"task_id":"$t1"}]}}
A> {"id":"a10","type":"list_tasks","payload":{"room_id":"$room","status":"blocked"}}
A< {"type":"task_list","reply_to":"a10","payload":{"tasks":[]}}
A> {"id":"a11","type":"list_tasks","payload":{"room_id":"$room","status":"done"}}
A< {"type":"error","reply_to":"a11","payload":{"code":"invalid_payload"}}
C> {"id":"c4","type":"list_tasks","payload":{"room_id":"$room"}}
C< {"type":"error","reply_to":"c4","payload":{"code":"not_in_room"}}
