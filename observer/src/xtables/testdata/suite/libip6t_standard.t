:INPUT,FORWARD,OUTPUT
-s ::/128;=;OK
! -d ::;! -d ::/128;OK
! -s ::;! -s ::/128;OK
-s ::/64;=;OK
