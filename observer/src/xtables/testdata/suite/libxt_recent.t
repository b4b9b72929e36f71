:INPUT,FORWARD,OUTPUT
-m recent --set --rttl;;FAIL
